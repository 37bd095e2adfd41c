"""The fused primitive on the GPU: a program's generated CUDA C (``formulas/fused_cuda.py``), compiled
by the runtime (NVRTC, or g++ on the simulator; both cache on disk by the text's hash) and launched
over its operands' layouts."""
import math

from .... import kernels
from ....formulas import fused_cuda
from ... import fused_cache
from .. import runtime


@kernels.register("fused", "cuda")
def fused(program, shape, operands):
    name = f"fused_{program.key()}"
    text = fused_cuda.source(program, name)
    fused_cache.keep("cuda", f"{name}.cu", text)   # (for the reader: the runtime keeps its own cache)
    kernel = runtime.compile_text(text)(name)
    layouts = [runtime.layout_arg(shape, strides, offset, str(program)) for _, offset, strides in operands]
    n = runtime.i64(math.prod(shape))
    count = math.prod(shape)

    def launch(*buffers):
        args = []
        for buf, layout in zip(buffers, layouts):
            args += (buf, layout)
        runtime.launch(kernel, count, *args, n)
    return launch
