"""Known differences between minidl and PyTorch's op corpus (tests/op_corpus.py), each with its reason.

A key is (entry, dtype, sample index): entry is op_db's 'name' or 'name:variant', dtype a name such as
'float64' (None: every dtype), index the sample's position among torch's samples for that dtype (None:
every sample). Allow-listed failing samples leave the denominator; test_op_corpus keeps this list
under 1% of the judged samples and fails on a key that no longer fails.
"""
ALLOW = {
    ("nn.functional.scaled_dot_product_attention", "float32", 21):
        "float32 rounding: scores up to ~300 (inputs in [-9, 9]); minidl and torch are each 9e-6 from the float64 "
        "result, on opposite sides at one of 384 values, so they differ by 1.8e-5 there",
}
