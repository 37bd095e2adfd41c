"""Review of minidl.compile (issue 42): calls where a replay gave other answers than the eager call."""
import collections

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl.compiler import GraphBreakError


def test_a_numpy_array_argument_runs_eagerly():
    # keyed by id(), a new array reusing a freed one's address replayed the first call's values
    f = minidl.compile(lambda a: minidl.tensor(a) * 2)
    for i in range(4):
        arr = np.full(3, float(i), dtype=np.float32)
        assert f(arr).tolist() == [2.0 * i] * 3
        del arr
    buffer = np.zeros(2, np.float32)   # (the same array refilled in place)
    for i in range(3):
        buffer[:] = i
        assert f(buffer).tolist() == [2.0 * i] * 2
    with pytest.raises(GraphBreakError, match="numpy array"):
        minidl.compile(lambda a: minidl.tensor(a), fullgraph=True)(buffer)


def test_an_object_argument_is_keyed_by_identity_only_while_it_lives():
    class Batch:
        def __init__(self, x):
            self.x = x

    f = minidl.compile(lambda b: minidl.tensor([b.x]) * 2)
    for i in range(4):
        assert f(Batch(float(i))).tolist() == [2.0 * i]


class _List(list):
    pass


@pytest.mark.parametrize("make", [lambda t: collections.OrderedDict(x=t),
                                  lambda t: collections.defaultdict(int, x=t),
                                  lambda t: _List([t])])
def test_tensors_in_other_containers_run_eagerly(make):
    # call_key described the tensors in them but the capture read the caller's own: replays gave the first's
    f = minidl.compile(lambda b: (b["x"] if isinstance(b, dict) else b[0]) * 2)
    for i in range(3):
        assert f(make(minidl.full((2,), float(i)))).tolist() == [2.0 * i] * 2


def test_other_containers_of_plain_values_are_keyed_by_value():
    f = minidl.compile(lambda x, h: x * h["scale"])
    h = collections.OrderedDict(scale=2.0)
    assert f(minidl.ones(2), h).tolist() == [2.0, 2.0]
    h["scale"] = 3.0
    assert f(minidl.ones(2), h).tolist() == [3.0, 3.0]


def test_an_argument_written_before_a_replay_raises_keeps_the_write():
    table = minidl.randn(4, 2)

    def step(x, idx):
        x.add_(1)
        return F.embedding(idx, table)

    f = minidl.compile(step)
    f(minidl.zeros(2), minidl.tensor([1]))
    f(minidl.zeros(2), minidl.tensor([2]))
    x = minidl.zeros(2)
    with pytest.raises(IndexError):
        f(x, minidl.tensor([9]))
    assert x.tolist() == [1.0, 1.0]   # (as eagerly)


def _dropout_model():
    minidl.manual_seed(0)
    return minidl.nn.Sequential(minidl.nn.Linear(3, 3), minidl.nn.Dropout(0.5))


def test_a_module_switched_to_eval_inside_the_call_is_guarded_on_the_mode_it_ran_in():
    # the guard compared the mode at the capture's end: the next call replayed train-mode dropout
    results = []
    for compiled in (False, True):
        model = _dropout_model()

        def fwd(x):
            out = model(x)
            model.eval()
            return out

        f = minidl.compile(fwd) if compiled else fwd
        minidl.manual_seed(1)
        with minidl.no_grad():
            results.append([f(minidl.ones(2, 3)).tolist() for _ in range(3)] + [model.training])
    assert results[0] == results[1]


def test_train_and_eval_inside_the_call_are_replayed():
    results = []
    for compiled in (False, True):
        model = _dropout_model()

        def fwd(x):
            model.train()
            out = model(x)
            model.eval()
            return out

        f = minidl.compile(fwd) if compiled else fwd
        minidl.manual_seed(1)
        seen = []
        with minidl.no_grad():
            for _ in range(3):
                seen.append(f(minidl.ones(2, 3)).tolist())
                seen.append(model.training)
        results.append(seen)
    assert results[0] == results[1]
    compiled = getattr(f, "_minidl_compiled", None) or f._compiled_call
    assert compiled.captures == 2   # (entered in train mode, then in eval: the third call replays)


def test_a_result_in_a_list_subclass_is_not_the_captured_object():
    # rebuildable() let list subclasses through, and _plan kept them whole: every replay returned the
    # captured object, its tensor the graph's buffer
    f = minidl.compile(lambda x: _List([x * 2]))
    kept = [f(minidl.full((2,), float(i))) for i in range(3)]
    assert [o[0].tolist() for o in kept] == [[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]


def test_a_call_that_saves_and_restores_the_mode_replays_for_either_entry_mode():
    results = []
    for compiled in (False, True):
        model = _dropout_model()

        def evaluate(x):
            was = model.training
            model.eval()
            out = model(x)
            model.train(was)
            return out

        f = minidl.compile(evaluate) if compiled else evaluate
        seen = []
        with minidl.no_grad():
            for mode in (True, True, False, False, True):
                model.train(mode)
                seen.append((f(minidl.ones(2, 3)).tolist(), model.training))
        results.append(seen)
    assert results[0] == results[1]


def test_a_module_made_inside_the_call():
    def fwd(x):
        minidl.manual_seed(0)
        return minidl.nn.Linear(3, 2)(x)

    f = minidl.compile(fwd)
    with minidl.no_grad():
        for i in range(3):
            assert f(minidl.full((1, 3), float(i))).tolist() == fwd(minidl.full((1, 3), float(i))).tolist()


def test_gradient_hooks_registered_after_the_capture_are_not_skipped():
    x, y = minidl.ones(4, 3), minidl.tensor([0, 1, 2, 0])
    minidl.manual_seed(0)
    m = minidl.nn.Linear(3, 3)
    opt = minidl.optim.SGD(m.parameters(), lr=0.1)

    @minidl.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss

    step(x, y)
    step(x, y)
    m.weight.register_hook(lambda g: g * 0)
    m.bias.register_post_accumulate_grad_hook(lambda p: p.grad.zero_())
    w, b = m.weight.clone(), m.bias.clone()
    step(x, y)
    assert m.weight.tolist() == w.tolist() and m.bias.tolist() == b.tolist()


def _scaler_run(compiled, unscale_inside):
    x, y = minidl.ones(4, 3), minidl.tensor([0, 1, 2, 0])
    minidl.manual_seed(0)
    m = minidl.nn.Linear(3, 3)
    opt = minidl.optim.SGD(m.parameters(), lr=0.1)
    scaler = minidl.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)

    def fwd_bwd(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        scaler.scale(loss).backward()
        if unscale_inside:
            scaler.unscale_(opt)
            minidl.nn.utils.clip_grad_norm_(m.parameters(), 10.0)
        return loss.detach()

    f = minidl.compile(fwd_bwd) if compiled else fwd_bwd
    seen = []
    for _ in range(4):
        f(x, y)
        seen.append(m.weight.grad.tolist())
        scaler.step(opt)
        scaler.update()
    return seen, m.weight.tolist(), scaler.get_scale()


@pytest.mark.parametrize("unscale_inside", [False, True])
def test_grad_scaler_with_step_and_update_outside_the_compiled_call(unscale_inside):
    # the scale made lazily inside the capture was re-filled with init_scale by every replay; an
    # unscale_ inside was replayed on the gradients but not on the scaler's stage, so step() unscaled again
    assert _scaler_run(True, unscale_inside) == _scaler_run(False, unscale_inside)


def test_negative_zero_is_another_argument_than_zero():
    f = minidl.compile(lambda x, s, c: (x / s, x * c[0]))
    for s in (0.0, -0.0, 0.0, -0.0, np.float32(-0.0)):
        got, want = f(minidl.ones(1), s, [s]), (minidl.ones(1) / s, minidl.ones(1) * s)
        assert [t.tolist() for t in got] == [t.tolist() for t in want]
        assert str(got[1].tolist()) == str(want[1].tolist())   # (-0.0 prints its sign)


class _Net(minidl.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = minidl.nn.Parameter(minidl.ones(3, 3))

    def forward(self, x):
        return F.dropout(x @ self.w, 0.5, training=self.training)


def test_a_compiled_bound_forward_guards_its_module():
    results = []
    for compiled in (False, True):
        minidl.manual_seed(0)
        net = _Net()
        f = minidl.compile(net.forward) if compiled else net.forward
        with minidl.no_grad():
            seen = [f(minidl.ones(1, 3)).tolist()]
            net.eval()
            seen.append(f(minidl.ones(1, 3)).tolist())
            net.w.data = minidl.full((3, 3), 2.0)
            seen.append(f(minidl.ones(1, 3)).tolist())
        results.append(seen)
    assert results[0] == results[1]


def test_a_submodule_replaced_after_the_capture():
    minidl.manual_seed(0)
    model = minidl.nn.Sequential(minidl.nn.Linear(3, 3), minidl.nn.ReLU(), minidl.nn.Linear(3, 2))
    compiled = minidl.compile(model)
    x = minidl.ones(1, 3)
    with minidl.no_grad():
        compiled(x)
        compiled(x)
        model[2] = minidl.nn.Linear(3, 4)
        assert compiled(x).tolist() == model(x).tolist()
        model[1] = minidl.nn.Tanh()
        assert compiled(x).tolist() == model(x).tolist()


def test_a_parameter_replaced_by_a_new_tensor_after_the_capture():
    minidl.manual_seed(0)
    model = minidl.nn.Sequential(minidl.nn.Linear(3, 2))
    compiled = minidl.compile(model)
    x = minidl.ones(1, 3)
    with minidl.no_grad():
        compiled(x)
        compiled(x)
        model[0].weight = minidl.nn.Parameter(minidl.zeros(2, 3))
        assert compiled(x).tolist() == model(x).tolist()
        model[0].bias = None
        assert compiled(x).tolist() == model(x).tolist()
        model.load_state_dict({"0.weight": minidl.ones(2, 3)}, strict=False, assign=True)
        assert compiled(x).tolist() == model(x).tolist()


def _freeze_run(compiled, calls):
    x, y = minidl.ones(4, 3), minidl.tensor([0, 1, 0, 1])
    minidl.manual_seed(0)
    backbone, head = minidl.nn.Linear(3, 3), minidl.nn.Linear(3, 2)
    opt = minidl.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.1)

    def step(x, y, freeze_after):
        opt.zero_grad()
        F.cross_entropy(head(backbone(x)), y).backward()
        opt.step()
        if freeze_after:
            backbone.requires_grad_(False)
        else:
            backbone.requires_grad_(True)

    f = minidl.compile(step) if compiled else step
    seen = []
    for freeze_after, unfreeze_before in calls:
        if unfreeze_before:
            backbone.requires_grad_(True)
        f(x, y, freeze_after)
        seen.append((backbone.weight.tolist(), head.weight.tolist(), backbone.weight.requires_grad))
    return seen


def test_requires_grad_set_inside_the_call_is_guarded_as_found_and_replayed():
    calls = [(False, False), (True, False), (True, False), (True, False), (True, True), (True, True),
             (False, False), (False, False)]
    assert _freeze_run(True, calls) == _freeze_run(False, calls)


def test_a_replay_stopped_by_a_changed_read_leaves_the_modes_it_found():
    results = []
    for compiled in (False, True):
        model = _dropout_model()

        def evaluate(x):
            was = model.training
            model.eval()
            out = model(x) * x.sum().item()   # (a read after the mode set: a check at the replay)
            model.train(was)
            return out

        f = minidl.compile(evaluate) if compiled else evaluate
        with minidl.no_grad():
            results.append([(f(minidl.full((2, 3), float(i))).tolist(), model.training) for i in range(3)])
    assert results[0] == results[1]


def test_a_dict_or_list_argument_changed_by_the_call():
    # the call was given a copy of each list and dict argument: what it put there never reached the caller
    def step(x, state, log):
        state["h"] = state["h"] * 0.5 + x
        log.append(state["h"].sum())
        return state["h"].sum()

    results = []
    for f in (step, minidl.compile(step)):
        state, log = {"h": minidl.zeros(2)}, []
        outs = [f(minidl.ones(2), state, log).item() for _ in range(3)]
        results.append((outs, state["h"].tolist(), [t.item() for t in log]))
    assert results[0] == results[1]
    f = minidl.compile(lambda x, d: d["x"] * x)   # (a dict only read still replays)
    for i in range(3):
        assert f(minidl.ones(1), {"x": minidl.full((1,), float(i))}).tolist() == [float(i)]
    assert (getattr(f, "_minidl_compiled", None) or f._compiled_call).captures == 1
