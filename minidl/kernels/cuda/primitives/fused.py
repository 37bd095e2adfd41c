"""The fused primitive on the GPU: a program's generated CUDA C (``formulas/fused_cuda.py``), compiled
by the runtime (NVRTC, or g++ on the simulator; both cache on disk by the text's hash) and launched
over its operands' layouts."""
import math

from .... import kernels
from ....formulas import fused_cuda
from ... import fused_cache
from .. import runtime


@kernels.register("fused", "cuda")
def fused(program, shape, operands, eshape=None):
    name = f"fused_{program.key()}"
    text = fused_cuda.source(program, name)
    fused_cache.keep("cuda", f"{name}.cu", text)   # (for the reader: the runtime keeps its own cache)
    kernel = runtime.compile_text(text)(name)
    op = str(program)
    prologue = len(program.loads) + len(program.stores)
    layouts = [runtime.layout_arg(shape, strides, offset, op) for _, offset, strides in operands[:prologue]]
    layouts += [runtime.layout_arg(eshape, strides, offset, op) for _, offset, strides in operands[prologue:]]
    if program.reduction is None:
        count = math.prod(shape)
        last = [runtime.i64(count)]
    else:
        count = math.prod(shape[:program.reduction.kept])
        last = [runtime.i64(count), runtime.i64(math.prod(shape[program.reduction.kept:]))]

    def launch(*buffers):
        args = []
        for buf, layout in zip(buffers, layouts):
            args += (buf, layout)
        if program.reduction is None:
            runtime.launch(kernel, count, *args, *last)
        else:
            runtime.launch_rows(kernel, count, *args, *last, block=fused_cuda.THREADS)
    launch.device_type = "cuda"
    return launch
