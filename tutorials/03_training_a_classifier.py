"""Tutorial 3: training a classifier end to end.

Run it:  python tutorials/03_training_a_classifier.py

Tutorials 1 and 2 built the two foundations: tensors (views over a buffer) and autograd (a tape
replayed backwards). This one puts them to work the way a real training script does, one piece
at a time, on the 8x8 handwritten digits that ship with minidl:

1. **Data.**   A ``Dataset`` answers "how many samples, and what is sample i"; a ``DataLoader``
               shuffles them and stacks them into batches.
2. **Model.**  An ``nn.Module`` subclass: layers are attributes, ``forward`` says how to use them,
               and the module finds its own parameters (``parameters()``, ``state_dict()``).
3. **Loss.**   Cross-entropy, which is ``log_softmax`` followed by ``nll_loss``; checked by hand.
4. **Loop.**   ``zero_grad()``, ``backward()``, ``step()``, and why all three are needed.
5. **Evaluation** under ``no_grad()`` and ``eval()``, a learning-rate schedule, a checkpoint
   saved and reloaded with ``minidl.save``/``minidl.load``, and a plot of the training curves.

The plot is
written to ``$MINIDL_TUTORIAL_OUT`` if that is set, else to a fresh temporary directory (never
into the repository). Every claim is checked with ``assert``.
"""
import argparse
import math
import os
import tempfile
import time

import minidl
from minidl import nn
from minidl.nn import functional as F
from minidl.optim import Adam
from minidl.optim.lr_scheduler import CosineAnnealingLR
from minidl.utils.data import DataLoader, TensorDataset
from minidl.vision.datasets import Digits

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def same(a, b):
    """Exactly equal: same shape and every element equal (torch.equal)."""
    return a.shape == b.shape and bool((a == b).all().item())


def close(a, b, rtol=1e-5, atol=1e-8):
    """Equal up to rounding: |a - b| <= atol + rtol * |b| everywhere (torch.allclose)."""
    return a.shape == b.shape and bool(((a - b).abs() <= atol + rtol * b.abs()).all().item())


began = time.perf_counter()
minidl.manual_seed(0)


# ---------------------------------------------------------------------------------------------
section("1. Data: a Dataset is len() and [i]; a DataLoader makes shuffled batches")
train_set = Digits(train=True)
test_set = Digits(train=False)
image, label = train_set[0]
print(train_set)
print(f"len(train) = {len(train_set)}, len(test) = {len(test_set)}; one sample: image {image.shape} "
      f"{image.dtype}, label {label}")
# The split is fixed (80/20, stratified, seeded), so the numbers below are the same on every run.
assert len(train_set) + len(test_set) == 1797
assert image.shape == (1, 8, 8) and image.dtype == minidl.float32 and 0 <= label <= 9
assert 0.0 <= image.min().item() and image.max().item() <= 1.0

# A DataLoader asks the dataset for ``batch_size`` samples and *collates* them: the images are
# stacked into one (B, 1, 8, 8) tensor, the int labels into one int64 tensor of shape (B,).
# shuffle=True draws a new order every epoch; a seeded Generator makes that order reproducible.
loader = DataLoader(train_set, batch_size=32, shuffle=True, generator=minidl.Generator().manual_seed(0))
images, labels = next(iter(loader))
print(f"one batch: images {images.shape}, labels {labels.shape} {labels.dtype}")
assert images.shape == (32, 1, 8, 8) and labels.shape == (32,) and labels.dtype == minidl.int64
assert len(loader) == math.ceil(len(train_set) / 32)       # the last batch is smaller

# Digits builds each sample on demand (pixels / 16, wrapped as a tensor), a little Python per
# sample. The whole set is tiny, so for the many epochs below we build every sample once and keep
# the tensors in a TensorDataset: same samples, same batches, less work per epoch.
def as_tensors(dataset):
    xs, ys = zip(*(dataset[i] for i in range(len(dataset))))
    return minidl.stack(xs), minidl.tensor(ys)


train_x, train_y = as_tensors(train_set)
test_x, test_y = as_tensors(test_set)
assert train_x.shape == (len(train_set), 1, 8, 8) and same(train_x[0], train_set[0][0])
generator = minidl.Generator().manual_seed(0)
train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=32, shuffle=True, generator=generator)
test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=256)


# ---------------------------------------------------------------------------------------------
section("2. The model: an nn.Module subclass")
# Assigning a Module (or an nn.Parameter) to an attribute in __init__ *registers* it. That is all
# it takes for the model to find its parameters, move them, save them and switch modes.
class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)    # 16 x 8 x 8
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)   # 32 x 8 x 8
        self.bn2 = nn.BatchNorm2d(32)
        self.pool = nn.MaxPool2d(2)                                # 32 x 4 x 4
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(32 * 4 * 4, 10)                        # one score ("logit") per class

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        return self.fc(self.dropout(x.flatten(1)))


model = SmallCNN()
print(model)

# parameters(): every tensor the optimizer should update (requires_grad=True), found by walking
# the registered submodules. named_parameters() gives the same with dotted names.
names = [name for name, _ in model.named_parameters()]
print("parameters:", names)
assert names == ["conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "conv2.weight", "conv2.bias",
                 "bn2.weight", "bn2.bias", "fc.weight", "fc.bias"]
assert all(p.requires_grad for p in model.parameters())
n_params = sum(p.numel() for p in model.parameters())
# conv: out*in*3*3 + out; batchnorm: a scale and a shift per channel; linear: out*in + out.
assert n_params == (16 * 1 * 9 + 16) + 2 * 16 + (32 * 16 * 9 + 32) + 2 * 32 + (10 * 512 + 10)
print(f"{n_params} parameters")

# state_dict(): everything needed to rebuild the model's *state*: the parameters PLUS the buffers,
# tensors that are not trained by gradients but still matter. BatchNorm keeps running averages of
# the batch mean and variance (used at evaluation time) and a counter of batches seen.
state = model.state_dict()
buffers = [k for k in state if k not in names]
print("state_dict keys that are not parameters (buffers):", buffers)
assert buffers == ["bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                   "bn2.running_mean", "bn2.running_var", "bn2.num_batches_tracked"]
assert not any(t.requires_grad for t in state.values())   # a detached snapshot, ready to save

logits = model(images)
print("model(batch) ->", logits.shape, "(a row of 10 class scores per image)")
assert logits.shape == (32, 10)


# ---------------------------------------------------------------------------------------------
section("3. The loss: cross-entropy = log_softmax + negative log-likelihood")
# The model outputs raw scores z. softmax turns a row into probabilities p_k = exp(z_k) / sum_j exp(z_j);
# the loss of a sample with true class y is -log p_y, small when the model puts its probability on
# y. In log space:  -log p_y = -(z_y - log sum_j exp(z_j)) = -log_softmax(z)[y].
# F.cross_entropy does exactly that, averaged over the batch. Check it by hand on 4 rows:
z = logits[:4].detach().double()
y = labels[:4]
by_hand = 0.0
for row, target in zip(z.tolist(), y.tolist()):
    m = max(row)                                   # subtract the max: exp() cannot overflow
    log_sum_exp = m + math.log(sum(math.exp(v - m) for v in row))
    by_hand += -(row[target] - log_sum_exp) / len(y)
ce = F.cross_entropy(z, y).item()
two_step = F.nll_loss(F.log_softmax(z, dim=1), y).item()
print(f"by hand {by_hand:.10f}   F.cross_entropy {ce:.10f}   nll_loss(log_softmax) {two_step:.10f}")
assert math.isclose(ce, by_hand, rel_tol=1e-12) and math.isclose(two_step, by_hand, rel_tol=1e-12)
# An untrained model is guessing: about 1/10 probability per class, so the loss is near log(10).
print(f"untrained loss on a batch: {F.cross_entropy(logits, labels).item():.3f} (log 10 = {math.log(10):.3f})")
assert abs(F.cross_entropy(logits, labels).item() - math.log(10)) < 1.0

# Its gradient with respect to the scores is neat: (softmax(z) - one_hot(y)) / batch size. It pushes
# the true class's score up and every other score down, each in proportion to its probability.
zz = z.clone().requires_grad_(True)
F.cross_entropy(zz, y).backward()
expected = (F.softmax(z, dim=1) - F.one_hot(y, 10).double()) / len(y)
assert close(zz.grad, expected, rtol=1e-12, atol=1e-15)
print("d loss / d z = (softmax(z) - one_hot(y)) / B: checked")


# ---------------------------------------------------------------------------------------------
section("4. One training step: zero_grad, backward, step")
# .backward() ADDS into .grad (tutorial 2: a leaf used twice gets the sum of both paths). That is
# what we want within one loss, but across steps it would pile old gradients onto new ones:
w = model.fc.weight
minidl.manual_seed(1)                                 # the same dropout mask in both forwards
F.cross_entropy(model(images), labels).backward()
first = w.grad.clone()
minidl.manual_seed(1)
F.cross_entropy(model(images), labels).backward()     # the same loss again, without zeroing...
print("second backward without zero_grad: fc.weight.grad became",
      f"{w.grad.norm().item() / first.norm().item():.3f} x the first")
assert close(w.grad, 2 * first)                       # ... gives twice the true gradient

optimizer = Adam(model.parameters(), lr=3e-3)
optimizer.zero_grad()                                 # ... so clear them first: .grad = None
assert all(p.grad is None for p in model.parameters())
loss = F.cross_entropy(model(images), labels)         # forward: records the tape
loss.backward()                                       # backward: fills every p.grad
assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())
before = w.detach().clone()
optimizer.step()                                      # update: p -= lr * (Adam's scaled) p.grad
assert not same(w.detach(), before)
# Adam's very first step moves each weight by about lr (its update is grad / sqrt(grad^2) ~ +-1).
print(f"largest change to fc.weight after one Adam step: {(w.detach() - before).abs().max().item():.5f} "
      f"(lr = 3e-3)")
assert (w.detach() - before).abs().max().item() <= 3e-3 * 1.001
# The step ran under no_grad inside the optimizer: updating a weight is not part of any tape.
assert w.grad_fn is None and w.is_leaf


# ---------------------------------------------------------------------------------------------
section("5. Evaluation: eval() and no_grad()")
# Two different switches, both needed:
# * model.eval() changes what layers DO: Dropout stops dropping, BatchNorm normalizes with its
#   running averages instead of the current batch's statistics (so one image's prediction does not
#   depend on which other images share its batch). model.train() switches back.
# * minidl.no_grad() stops RECORDING the tape: no graph, no saved tensors, less memory and time.
def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with minidl.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.shape[0]
    return correct / total


model.train()
assert model.training and model.dropout.training
one = test_x[:1]
with minidl.no_grad():
    out = model(test_x[:8])
    assert out.grad_fn is None and not out.requires_grad
    model.eval()
    alone, in_batch = model(one), model(test_x[:8])[:1]
# In eval mode a prediction is deterministic and independent of the rest of the batch.
assert not model.training and not model.bn1.training
assert close(alone, in_batch, atol=1e-5)
print("eval(): the same image gives the same scores alone or in a batch; no_grad(): no grad_fn")


# ---------------------------------------------------------------------------------------------
section("6. The training loop, with a cosine learning-rate schedule")
# A large learning rate makes fast progress early; a small one lets the weights settle at the end.
# CosineAnnealingLR lowers the lr from its initial value to 0 along half a cosine over T_max epochs:
#   lr(epoch) = lr0 * (1 + cos(pi * epoch / T_max)) / 2.  scheduler.step() is called once per epoch.
minidl.manual_seed(0)
model = SmallCNN()
epochs, lr0 = 10, 3e-3
optimizer = Adam(model.parameters(), lr=lr0)
scheduler = CosineAnnealingLR(optimizer, T_max=epochs)
history = {"loss": [], "train_acc": [], "test_acc": [], "lr": []}
for epoch in range(epochs):
    model.train()                                     # evaluate() left it in eval mode
    lr = optimizer.param_groups[0]["lr"]
    assert math.isclose(lr, lr0 * (1 + math.cos(math.pi * epoch / epochs)) / 2, rel_tol=1e-9, abs_tol=1e-15)
    total_loss = correct = seen = 0
    for x, y in train_loader:
        scores = model(x)
        loss = F.cross_entropy(scores, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * y.shape[0]
        correct += (scores.argmax(dim=1) == y).sum().item()
        seen += y.shape[0]
    scheduler.step()                                  # once per epoch, after the optimizer steps
    # (train accuracy is counted on the fly, in train mode, while the weights are still moving;
    # test accuracy is measured after the epoch, in eval mode)
    history["loss"].append(total_loss / seen)
    history["train_acc"].append(correct / seen)
    history["test_acc"].append(evaluate(model, test_loader))
    history["lr"].append(lr)
    print(f"epoch {epoch + 1:2d}  lr {lr:.5f}  loss {history['loss'][-1]:.4f}  "
          f"train acc {history['train_acc'][-1]:.4f}  test acc {history['test_acc'][-1]:.4f}")

assert history["loss"][-1] < history["loss"][0] / 5, history["loss"]
assert history["test_acc"][-1] > 0.95, history["test_acc"]
assert history["lr"][0] == lr0 and history["lr"][-1] < 0.03 * lr0
assert optimizer.param_groups[0]["lr"] < 1e-12                       # T_max epochs later: 0
print(f"loss fell from {history['loss'][0]:.3f} to {history['loss'][-1]:.4f}; "
      f"test accuracy {history['test_acc'][-1]:.4f} on {len(test_set)} unseen images")


# ---------------------------------------------------------------------------------------------
section("7. Saving a checkpoint and loading it into a fresh model")
# Save the state, not the object: the state_dict (plus, for resuming training, the optimizer's and
# the scheduler's state and the epoch). minidl.save writes one safetensors file; minidl.load gives
# the same nested dict back. To use it, build the model from code and load_state_dict into it.
out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl-tutorial-03-")
os.makedirs(out_dir, exist_ok=True)
path = os.path.join(out_dir, "digits-cnn.safetensors")
minidl.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "epoch": epochs}, path)
print(f"saved {path} ({os.path.getsize(path) / 1024:.1f} KiB)")

checkpoint = minidl.load(path)
restored = SmallCNN()                                 # fresh random weights...
with minidl.no_grad():
    assert not same(restored(test_x[:8]), model(test_x[:8]))
restored.load_state_dict(checkpoint["model"])         # ... replaced by the trained ones
assert checkpoint["epoch"] == epochs
for key, value in model.state_dict().items():
    assert same(restored.state_dict()[key], value), key

model.eval()
restored.eval()
with minidl.no_grad():
    original_scores, restored_scores = model(test_x), restored(test_x)
# Bit-for-bit: same weights, same buffers, same code, same input -> the very same numbers.
assert same(original_scores, restored_scores)
assert same(original_scores.argmax(1), restored_scores.argmax(1))
assert evaluate(restored, test_loader) == history["test_acc"][-1]
print(f"reloaded model: identical scores on all {len(test_set)} test images, "
      f"test accuracy {evaluate(restored, test_loader):.4f}")
# Forgetting eval() is a classic bug: in train mode BatchNorm uses the batch's own statistics and
# Dropout drops, so the same weights give different scores.
restored.train()
with minidl.no_grad():
    assert not close(restored(test_x), original_scores)
restored.eval()


# ---------------------------------------------------------------------------------------------
section("8. The training curves as a PNG")
import matplotlib
matplotlib.use("Agg")                             # draw to a file; no display needed
import matplotlib.pyplot as plt  # noqa: E402
epoch_axis = range(1, epochs + 1)
fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
ax_loss.plot(epoch_axis, history["loss"], marker="o")
ax_loss.set(title="training loss (cross-entropy)", xlabel="epoch", ylabel="loss", yscale="log")
ax_lr = ax_loss.twinx()
ax_lr.plot(epoch_axis, history["lr"], color="gray", linestyle="--", label="learning rate")
ax_lr.set_ylabel("learning rate (dashed)")
ax_acc.plot(epoch_axis, history["train_acc"], marker="o", label="train")
ax_acc.plot(epoch_axis, history["test_acc"], marker="s", label="test")
ax_acc.set(title="accuracy", xlabel="epoch", ylabel="accuracy")
ax_acc.legend()
fig.suptitle("SmallCNN on the 8x8 digits (minidl)")
fig.tight_layout()
png = os.path.join(out_dir, "03_training_curves.png")
fig.savefig(png, dpi=100)
plt.close(fig)
with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
print(f"wrote {png}")

print(f"\n(ran in {time.perf_counter() - began:.1f} s)")
print()
print("All claims checked: a small CNN learned the digits, and its checkpoint reloads exactly.")
