"""InstanceNorm1d, InstanceNorm2d, InstanceNorm3d: batch norm's parameters and running statistics (off by default),
each (sample, channel) normalised over its own spatial dims (F.instance_norm); unbatched inputs as torch's."""
from __future__ import annotations

import warnings

from . import functional as F
from .batchnorm import _BatchNorm


class _InstanceNorm(_BatchNorm):
    _dims = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        if affine and not bias:
            self.register_parameter("bias", None)

    def forward(self, input):
        self._check_input_dim(input)
        unbatched = input.ndim == self._dims[0]
        channel_dim = 0 if unbatched else 1
        if input.shape[channel_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={channel_dim} to match num_features "
                                 f"({self.num_features}), but got: {input.shape[channel_dim]}.")
            warnings.warn(f"input's size at dim={channel_dim} does not match num_features. You can silence this "
                          f"warning by not passing in num_features, which is not used because affine=False",
                          stacklevel=2)
        x = input.unsqueeze(0) if unbatched else input
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats,
                              0.0 if self.momentum is None else self.momentum, self.eps)
        return out.squeeze(0) if unbatched else out

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    _dims = (2, 3)   # (unbatched (C, L), batched (N, C, L))


class InstanceNorm2d(_InstanceNorm):
    _dims = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    _dims = (4, 5)
