"""The ONNX graph a trace builds: nodes, initializers, inputs and outputs, kept as plain Python
and numpy until ``model()`` hands them to the ``onnx`` package's helper (so tracing and the
lowerings need no ``onnx`` import)."""
from __future__ import annotations

import itertools

import numpy as np


class Graph:
    def __init__(self, opset: int):
        self.opset = opset
        self.nodes = []           # (op_type, input names, output names, attributes)
        self.initializers = {}    # name -> numpy array
        self.inputs = []          # (name, numpy dtype, dims: ints and symbolic names)
        self.outputs = []
        self._names = itertools.count()
        self._constants = {}      # (dtype, shape, bytes) -> initializer name: one per distinct value
        self.value_info = []      # (name, numpy dtype, dims): types declared for values inference cannot type
        self.domains = {}         # custom domain -> opset version (a node's op_type "domain::Type" is in it)

    def fresh(self, hint: str) -> str:
        return f"/{hint}_{next(self._names)}"

    def op(self, op_type: str, *inputs, outputs: int = 1, **attributes):
        """Append a node; its output name, or a tuple of ``outputs`` names. An input of None is an
        omitted optional input ("")."""
        names = tuple(self.fresh(op_type) for _ in range(outputs))
        inputs = ["" if i is None else i for i in inputs]
        while inputs and inputs[-1] == "":   # (trailing optional inputs left out, not named "")
            inputs.pop()
        self.nodes.append((op_type, inputs, list(names), attributes))
        return names[0] if outputs == 1 else names

    def constant(self, value, dtype=None, name: str | None = None) -> str:
        """An initializer holding ``value`` (numpy-convertible); equal constants share one."""
        array = np.array(value, dtype=dtype, order="C", copy=True)   # (0-d stays 0-d; a copy: params may move on)
        if name is not None:
            self.initializers[name] = array
            return name
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            self._constants[key] = f"/Constant_{next(self._names)}"
            self.initializers[self._constants[key]] = array
        return self._constants[key]

    def model(self, producer: str, version: str, doc: str = ""):
        """The onnx.ModelProto (needs the ``onnx`` package)."""
        from onnx import helper, numpy_helper

        def info(name, dtype, dims):
            return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), dims)
        def attribute(v):
            return numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
        def node(i, op_type, inputs, outputs, attributes):
            domain, _, op_type = op_type.rpartition("::")
            return helper.make_node(op_type, inputs, outputs, name=f"{op_type}_{i}", domain=domain or None,
                                    **{k: attribute(v) for k, v in attributes.items() if v is not None})
        nodes = [node(i, *n) for i, n in enumerate(self.nodes)]
        made = {name for n in self.nodes for name in n[2]}
        initializers = [numpy_helper.from_array(array, name) for name, array in self.initializers.items()]
        graph = helper.make_graph(nodes, "main_graph", [info(*i) for i in self.inputs],
                                  [info(*o) for o in self.outputs], initializers,
                                  value_info=[info(*v) for v in self.value_info if v[0] in made])
        # (the IR version that came with this opset, not the newest this onnx knows: older runtimes load it)
        model = helper.make_model_gen_version(graph, producer_name=producer, producer_version=version,
                                              opset_imports=[helper.make_opsetid("", self.opset)], doc_string=doc)
        used = {n.domain for n in nodes if n.domain}
        model.opset_import.extend(helper.make_opsetid(d, self.domains.get(d, 1)) for d in sorted(used))
        return model
