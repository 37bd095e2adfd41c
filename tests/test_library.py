"""minidl.library end to end: a softplus written in C, compiled here into a shared library, loaded with ctypes
and registered for "cpu" on buffers and layouts; the same op as a CUDA source on the simulator; used in a
module, differentiated through register_autograd and checked against minidl's own softplus (float64
finite differences) and torch's; captured by minidl.compile; exported to ONNX as a node of its namespace.
Every bad input is an error naming the op."""
import itertools
import shutil
import subprocess

import numpy as np
import pytest
import torch

import minidl
import minidl.nn.functional as F
from minidl import library, nn
from minidl.library import c_kernel, cuda_kernel, custom_op

from cuda_support import cuda  # noqa: F401  (the fixture)
from test_gradcheck import gradcheck

C_SOURCE = r"""
#include <math.h>
#include "minidl_kernel.h"

/* torch's softplus: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold */
#define SOFTPLUS(T, NAME)                                                                          \
int NAME(const T *x, Layout xl, double beta, double threshold, T *out, Layout ol, int64_t n) {    \
    for (int64_t i = 0; i < n; ++i) {                                                              \
        T v = x[minidl_position(&xl, i)];                                                          \
        T bx = (T)beta * v;                                                                        \
        out[minidl_position(&ol, i)] = bx > (T)threshold ? v : (T)(log1p(exp(bx)) / beta);       \
    }                                                                                              \
    return 0;                                                                                      \
}
SOFTPLUS(float, softplus_f32)
SOFTPLUS(double, softplus_f64)

int scale_f64(double *x, Layout xl, double factor, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[minidl_position(&xl, i)] *= factor;
    return 0;
}

int refuse_f64(const double *x, Layout xl, double *out, Layout ol, int64_t n) { return 7; }
"""

CUDA_SOURCE = r"""
extern "C" __global__ void softplus_f32(const float *x, Layout xl, double beta, double threshold, float *out,
                                        Layout ol, long long n) {
    GRID_STRIDE_LOOP(i, n) {
        float v = x[position(xl, i)], bx = (float)beta * v;
        out[position(ol, i)] = bx > (float)threshold ? v : (float)(log1p(exp((double)bx)) / beta);
    }
}
"""

_names = itertools.count()


def fresh(name):
    """A new op name per test: ops are defined once per process."""
    return f"mdltest::{name}_{next(_names)}"


@pytest.fixture(scope="module")
def shared_library(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("these tests compile a C kernel: no C compiler (cc, gcc) found")
    folder = tmp_path_factory.mktemp("kernels")
    (folder / "softplus.c").write_text(C_SOURCE)
    path = folder / "libsoftplus.so"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-I", library.include_dir(), str(folder / "softplus.c"),
                    "-o", str(path), "-lm"], check=True)
    return path


def make_softplus(path, name="softplus"):
    """The op as a user writes it: a reference on Tensors (minidl ops, every device), the C kernel for "cpu",
    its fake and its backward."""
    @custom_op(fresh(name), mutates_args=())
    def softplus(x: minidl.Tensor, beta: float = 1.0, threshold: float = 20.0) -> minidl.Tensor:
        return F.softplus(x, beta, threshold)

    softplus.register_kernel("cpu", c_kernel(path, {minidl.float32: "softplus_f32", minidl.float64: "softplus_f64"}))

    @softplus.register_fake
    def _(x, beta=1.0, threshold=20.0):
        return minidl.empty_like(x)

    def setup_context(ctx, inputs, output):
        x, beta, threshold = inputs
        ctx.save_for_backward(x)
        ctx.beta, ctx.threshold = beta, threshold

    def backward(ctx, grad):
        x, = ctx.saved_tensors
        bx = x * ctx.beta
        return minidl.where(bx > ctx.threshold, grad, grad * minidl.sigmoid(bx)), None, None

    softplus.register_autograd(backward, setup_context=setup_context)
    return softplus


@pytest.fixture(scope="module")
def softplus(shared_library):
    return make_softplus(shared_library)


def strided(values, dtype):
    """A transposed, sliced view: the kernel must follow its layout."""
    base = minidl.tensor(np.ascontiguousarray(values.T), dtype=dtype)
    return base.t()[:, 1:]


@pytest.mark.parametrize("dtype", [minidl.float32, minidl.float64])
def test_the_c_kernel_matches_minidl_and_torch_on_strided_views(softplus, dtype):
    values = np.random.default_rng(0).standard_normal((5, 7)) * 12
    x = strided(values, dtype)
    got = softplus(x, 2.0, 15.0)
    assert got.dtype is dtype and tuple(got.shape) == (5, 6)
    np.testing.assert_allclose(got.numpy(), F.softplus(x, 2.0, 15.0).numpy(), rtol=1e-6, atol=1e-7)
    expected = torch.nn.functional.softplus(torch.tensor(values[:, 1:], dtype=getattr(torch, dtype.name)), 2.0, 15.0)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6, atol=1e-7)


def test_the_op_is_found_under_minidl_ops_by_namespace(softplus):
    namespace, name = softplus._qualname.split("::")
    assert getattr(getattr(minidl.ops, namespace), name) is softplus
    assert getattr(minidl.ops, namespace).__getattr__(name).default is softplus
    assert name in dir(getattr(minidl.ops, namespace))
    with pytest.raises(AttributeError, match="no op 'nothing'"):
        getattr(minidl.ops, namespace).nothing
    with pytest.raises(AttributeError, match="no attribute 'nonamespace'"):
        minidl.ops.nonamespace


def test_gradients_through_register_autograd_match_finite_differences(softplus):
    gradcheck(lambda x: softplus(x, 1.5, 3.0), [np.random.default_rng(1).standard_normal((3, 4)) * 3])
    gradcheck(lambda x: softplus(x * 1.0, 1.0), [np.random.default_rng(2).standard_normal(6)])


def test_inside_a_module_training_matches_the_same_module_with_minidl_softplus(softplus):
    class Net(nn.Module):
        def __init__(self, act):
            super().__init__()
            self.fc1, self.fc2, self.act = nn.Linear(4, 8), nn.Linear(8, 1), act

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    minidl.manual_seed(0)
    ours = Net(lambda h: softplus(h, 2.0))
    reference = Net(lambda h: F.softplus(h, 2.0))
    reference.load_state_dict(ours.state_dict())
    x, y = minidl.randn(16, 4), minidl.randn(16, 1)
    for net in (ours, reference):
        opt = minidl.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(net(x), y).backward()
            opt.step()
    for a, b in zip(ours.parameters(), reference.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_other_devices_run_the_reference_kernel_and_a_cuda_source_on_the_simulator(softplus, cuda):  # noqa: F811
    x = minidl.randn(33, 3) * 8
    on_gpu = x.to("cuda")
    np.testing.assert_allclose(softplus(on_gpu, 0.5).cpu().numpy(), softplus(x, 0.5).numpy(), rtol=1e-6)
    softplus.register_kernel("cuda", cuda_kernel(CUDA_SOURCE, {minidl.float32: "softplus_f32"}))
    try:
        got = softplus(on_gpu.t(), 0.5, 4.0)   # (a transposed layout)
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), F.softplus(x.t(), 0.5, 4.0).numpy(), rtol=1e-6, atol=1e-7)
        with pytest.raises(TypeError, match=f"{softplus._qualname}: its CUDA source has no kernel for dtype float64"):
            softplus(on_gpu.double())
    finally:
        softplus.register_kernel("cuda", lambda x, beta=1.0, threshold=20.0: F.softplus(x, beta, threshold))


def test_a_mutating_op_writes_in_place_and_bumps_the_version(shared_library):
    scale = custom_op(fresh("scale_"), c_kernel(shared_library, "scale_f64"), mutates_args={"x"},
                      schema="(Tensor(a0!) x, float factor) -> ()")
    x = minidl.arange(6, dtype=minidl.float64).view(2, 3)
    version = x._version
    assert scale(x.t(), 3.0) is None
    np.testing.assert_array_equal(x.numpy(), np.arange(6).reshape(2, 3) * 3.0)
    assert x._version > version
    w = minidl.ones(3, dtype=minidl.float64, requires_grad=True)
    y = w * 2
    z = y * y   # (saves y for its backward)
    scale(y, 2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_minidl_compile_captures_a_c_kernel_and_breaks_on_a_kernel_on_tensors(softplus):
    def step(x):
        return softplus(x * 2.0, 1.0) + 1.0
    compiled = minidl.compile(step, fullgraph=True)
    for seed in range(3):   # (the first call captures, the others replay with new values)
        x = minidl.randn(4, 5, generator=minidl.Generator().manual_seed(seed))
        np.testing.assert_allclose(compiled(x).numpy(), step(x).numpy(), rtol=1e-6)
    on_tensors = custom_op(fresh("on_tensors"), lambda x: x * 2.0, mutates_args=(),
                           schema="(Tensor x) -> Tensor")
    with pytest.raises(minidl.compiler.GraphBreakError, match=f"custom op {on_tensors._qualname} runs a kernel on"):
        minidl.compile(lambda x: on_tensors(x) + 1.0, fullgraph=True)(minidl.randn(3))


def test_onnx_export_makes_a_node_of_the_ops_namespace(softplus, tmp_path):
    onnx = pytest.importorskip("onnx")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            return softplus(self.fc(x), 2.0).relu()

    program = minidl.onnx.export(Net(), (minidl.randn(2, 3),), custom_opsets={softplus._namespace: 3},
                                 dynamic_axes={"x": {0: "batch"}}, input_names=["x"])
    model = program.model_proto
    node = next(n for n in model.graph.node if n.domain == softplus._namespace)
    assert node.op_type == softplus._name
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute} == {"beta": 2.0, "threshold": 20.0}
    assert {o.domain: o.version for o in model.opset_import}[softplus._namespace] == 3
    declared = next(v for v in model.graph.value_info if v.name == node.output[0])
    assert declared.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert len(declared.type.tensor_type.shape.dim) == 2
    onnx.checker.check_model(model)


def test_onnx_export_refuses_a_custom_op_without_a_fake_by_name():
    pytest.importorskip("onnx")
    op = custom_op(fresh("unfaked"), lambda x: x * 2.0, mutates_args=(), schema="(Tensor x) -> Tensor")
    with pytest.raises(minidl.onnx.OnnxExporterError, match=f"custom op {op._qualname} has no fake"):
        minidl.onnx.export(lambda x: op(x) + 1.0, (minidl.randn(2),))


def test_several_outputs_keyword_only_arguments_and_needs_input_grad_as_torch_passes_them():
    @custom_op(fresh("split_scale"), mutates_args=())
    def split_scale(x: minidl.Tensor, y: minidl.Tensor, *, alpha: float = 2.0) -> tuple[minidl.Tensor, minidl.Tensor]:
        return x * alpha, x * y

    split_scale.register_fake(lambda x, y, *, alpha: (minidl.empty_like(x), minidl.empty_like(x)))
    seen = {}

    def setup_context(ctx, inputs, keyword_only_inputs, output):   # (torch's documented order: by keyword)
        seen.update(inputs=len(inputs), keywords=keyword_only_inputs)
        ctx.save_for_backward(*inputs)
        ctx.alpha = keyword_only_inputs["alpha"]

    def backward(ctx, ga, gb):
        x, y = ctx.saved_tensors
        seen["needs"] = ctx.needs_input_grad[:2]
        return (ga * ctx.alpha + gb * y if ctx.needs_input_grad[0] else None,
                gb * x if ctx.needs_input_grad[1] else None)

    split_scale.register_autograd(backward, setup_context=setup_context)
    x = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = minidl.tensor([3.0, 4.0])
    a, b = split_scale(x, y, alpha=5.0)
    (a.sum() + (b * 2).sum()).backward()
    assert seen == {"inputs": 2, "keywords": {"alpha": 5.0}, "needs": (True, False)}
    np.testing.assert_allclose(x.grad.numpy(), [5 + 6, 5 + 8])


def test_registration_by_name_and_a_python_kernel_on_buffers_with_an_absent_optional_tensor():
    name = fresh("axpy")

    def axpy(x: minidl.Tensor, y: "minidl.Tensor | None", alpha: float) -> minidl.Tensor:
        return x * alpha + (0.0 if y is None else y)

    assert library.infer_schema(axpy, mutates_args=()) == "(Tensor x, Tensor? y, float alpha) -> Tensor"
    op = custom_op(name, axpy, mutates_args=())
    seen = []

    def on_buffers(x, x_layout, y, y_layout, alpha, out, out_layout, n):
        seen.append((y, y_layout, n))
        xs = np.lib.stride_tricks.as_strided(x[x_layout.offset:], x_layout.shape,
                                             [s * x.itemsize for s in x_layout.strides])
        out[out_layout.offset:out_layout.offset + n] = (xs * alpha).reshape(-1)

    library.register_kernel(name, None, library.buffer_kernel(on_buffers))   # (every device)
    library.register_fake(name)(lambda x, y, alpha: x.new_empty(x.shape))
    library.register_autograd(name, lambda ctx, g: (g * 3.0, None, None))
    x = minidl.arange(6.0).view(2, 3).t().requires_grad_()
    y = minidl.ops.__getattr__(op._namespace).__getattr__(op._name)(x, None, 3.0)
    np.testing.assert_array_equal(y.detach().numpy(), np.arange(6.0).reshape(2, 3).T * 3)
    assert seen == [(None, None, 6)]
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 2), 3.0))


# -- bad input: each a clear error naming the op -------------------------------------------------------------
def test_names_must_have_a_namespace_and_ops_are_defined_once(softplus):
    with pytest.raises(ValueError, match="'namespace::op_name'"):
        custom_op("softplus", lambda x: x, mutates_args=(), schema="(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match="minidl's own"):
        custom_op("aten::softplus", lambda x: x, mutates_args=(), schema="(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match=f"an op named '{softplus._qualname}' is already defined .*test_library"):
        custom_op(softplus._qualname, lambda x: x, mutates_args=(), schema="(Tensor x) -> Tensor")


def test_a_kernel_for_an_unknown_device_and_a_library_without_the_symbol(softplus, shared_library, tmp_path):
    with pytest.raises(ValueError, match=f"{softplus._qualname}: register_kernel for unknown device type 'tpu'"):
        softplus.register_kernel("tpu", lambda x, beta=1.0, threshold=20.0: x)
    with pytest.raises(AttributeError, match=f"{softplus._qualname}: the shared library .* has no symbol 'nothing'"):
        softplus.register_kernel("cpu", c_kernel(shared_library, "nothing"))
    with pytest.raises(OSError, match=f"{softplus._qualname}: cannot load the shared library"):
        softplus.register_kernel("cpu", c_kernel(tmp_path / "missing.so", "softplus_f64"))
    with pytest.raises(ValueError, match="runs on cuda, not on cpu"):
        softplus.register_kernel(["cuda", "cpu"], cuda_kernel(CUDA_SOURCE, "softplus_f32"))   # (nothing registered)
    with pytest.raises(ValueError, match="no custom op named 'mdltest::never'"):
        library.register_kernel("mdltest::never", "cpu", lambda x: x)
    x = minidl.randn(3)
    np.testing.assert_allclose(softplus(x).numpy(), F.softplus(x).numpy(), rtol=1e-6)   # (still the C kernel)


def test_a_kernel_returning_the_wrong_shape_or_an_input_or_failing(shared_library):
    op = custom_op(fresh("wrong"), lambda x: x.new_zeros(5), mutates_args=(), schema="(Tensor x) -> Tensor")
    op(minidl.randn(3))   # (nothing to check it against without a fake)
    op.register_fake(lambda x: minidl.empty_like(x))
    with pytest.raises(RuntimeError, match=rf"{op._qualname}: its cpu kernel returned output 0 of shape \(5,\) .* "
                                           rf"its fake says shape \(3,\)"):
        op(minidl.randn(3))
    alias = custom_op(fresh("alias"), lambda x: x.view(-1), mutates_args=(), schema="(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match=f"{alias._qualname}: output 0 of its cpu kernel is .* an input"):
        alias(minidl.randn(2, 2))
    pair = custom_op(fresh("pair"), lambda x: x * 1.0, mutates_args=(), schema="(Tensor x) -> (Tensor, Tensor)")
    with pytest.raises(RuntimeError, match=f"{pair._qualname}: its cpu kernel returned Tensor; the schema says 2"):
        pair(minidl.randn(2))
    refuse = custom_op(fresh("refuse"), c_kernel(shared_library, "refuse_f64"), mutates_args=(),
                       schema="(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match=f"{refuse._qualname}: .* register one with register_fake"):
        refuse(minidl.randn(2, dtype=minidl.float64))
    refuse.register_fake(lambda x: minidl.empty_like(x))
    with pytest.raises(RuntimeError, match=f"{refuse._qualname}: its C kernel refuse_f64 .* returned error code 7"):
        refuse(minidl.randn(2, dtype=minidl.float64))


def test_calls_that_do_not_fit_the_schema_or_have_no_kernel(softplus):
    with pytest.raises(RuntimeError, match=f"{softplus._qualname}\\(\\) Expected a value of type 'float' for argument "
                                           f"'beta'"):
        softplus(minidl.randn(2), "two")
    with pytest.raises(RuntimeError, match=f"{softplus._qualname}\\(\\) expected at most 3 argument"):
        softplus(minidl.randn(2), 1.0, 2.0, 3.0)
    with pytest.raises(TypeError, match=f"{softplus._qualname}: its C library has no kernel for dtype int64"):
        softplus(minidl.arange(3))
    mixed = custom_op(fresh("mixed"), c_kernel(softplus._kernels["cpu"].path, "softplus_f64"), mutates_args=(),
                      schema="(Tensor x, float beta, float threshold) -> Tensor")
    mixed.register_fake(lambda x, beta, threshold: minidl.empty_like(x, dtype=minidl.float64))
    with pytest.raises(TypeError, match=f"{mixed._qualname}: its C library kernel takes tensors of one dtype, got "
                                        f"float32, float64"):
        mixed(minidl.randn(3), 1.0, 20.0)
    with pytest.raises(ValueError, match=f"{mixed._qualname}: a kernel on buffers takes tensors of at most 8 dims"):
        mixed(minidl.randn(*[1] * 9, dtype=minidl.float64), 1.0, 20.0)


def test_a_device_without_a_kernel_and_tensors_on_two_devices(cuda):  # noqa: F811
    cpu_only = custom_op(fresh("cpu_only"), lambda x, y: x * y, mutates_args=(), device_types="cpu",
                         schema="(Tensor x, Tensor y) -> Tensor")
    x = minidl.randn(2)
    with pytest.raises(NotImplementedError, match=f"{cpu_only._qualname} has no kernel for device type 'cuda' "
                                                  f"\\(kernels registered for: cpu\\)"):
        cpu_only(x.to("cuda"), x.to("cuda"))
    with pytest.raises(RuntimeError, match=f"{cpu_only._qualname}: expected all tensors on one device, got cpu and "
                                           f"cuda:0"):
        cpu_only(x, x.to("cuda"))


def test_backward_without_an_autograd_formula_names_the_op():
    op = custom_op(fresh("no_grad"), lambda x: x * 2.0, mutates_args=(), schema="(Tensor x) -> Tensor")
    y = op(minidl.randn(3, requires_grad=True))
    assert y.requires_grad
    with pytest.raises(RuntimeError, match=f"backward through {op._qualname} but no autograd formula"):
        y.sum().backward()
    def add_one(x):
        x.add_(1.0)

    mutating = custom_op(fresh("mutating"), add_one, mutates_args={"x"}, schema="(Tensor(a!) x) -> ()")
    with pytest.raises(RuntimeError, match=f"{mutating._qualname}: cannot register an autograd formula"):
        mutating.register_autograd(lambda ctx, g: g)
    with pytest.raises(RuntimeError, match=f"{mutating._qualname}: a leaf Variable that requires grad \\(x\\)"):
        mutating(minidl.zeros(2, requires_grad=True))
    writes_and_returns = custom_op(fresh("writes_and_returns"), lambda x, y: add_one(x) or y * 2.0,
                                   mutates_args={"x"}, schema="(Tensor(a!) x, Tensor y) -> Tensor")
    x, y = minidl.zeros(2), minidl.ones(2, requires_grad=True)
    out = writes_and_returns(x, y)   # (the kernel writes x under no_grad; the output keeps a node)
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.0])
    with pytest.raises(RuntimeError, match=f"backward through {writes_and_returns._qualname} but no autograd"):
        out.sum().backward()
    gathered = custom_op(fresh("gathered"), lambda xs: [t * 1.0 for t in xs], mutates_args=(),
                         schema="(Tensor[] xs) -> Tensor[]")
    with pytest.raises(NotImplementedError, match=f"{gathered._qualname}: gradients through a Tensor\\[\\] argument"):
        gathered([minidl.ones(2, requires_grad=True)])
    assert len(gathered([minidl.ones(2)])) == 1
