"""A hidden state carried in a dict argument (state["h"] = ...): the call is given a copy of each list
and dict argument (with the graph's own tensors swapped in), so the assignment went into the copy, even
at the capturing call, and the replays kept reading the caller's untouched state. Eager: 2, 3, 3.5
and h = 1.75; compiled: 2, 2, 2 and h = 0."""
import minidl
def step(x, state):
    state["h"] = state["h"] * 0.5 + x       # carry a hidden state in a dict argument
    return state["h"].sum()
for compiled in (False, True):
    f = minidl.compile(step) if compiled else step
    state = {"h": minidl.zeros(2)}
    outs = [f(minidl.ones(2), state).item() for _ in range(3)]
    print("compiled" if compiled else "eager   ", outs, state["h"].tolist())
