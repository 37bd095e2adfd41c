"""torch.special's counterpart: the ops declared in the "special" namespace (functions torch has only
there: zeta, i1, entr, ...), and its other names for minidl's ops (expit is sigmoid, psi digamma, ...)."""
from .ops import registry as _registry
from .ops import (digamma, erf, erfc, erfinv, exp2, expm1, i0, igamma, igammac, lgamma, log1p,  # noqa: F401
                  log_softmax, logit, logsumexp, mvlgamma as multigammaln, polygamma, round, sigmoid as expit, sinc,
                  softmax, xlogy)

globals().update(_registry.functions("special"))
psi = digamma
gammaln = lgamma
gammainc = igamma
gammaincc = igammac
