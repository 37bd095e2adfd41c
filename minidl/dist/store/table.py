"""What each store operation does to a key-value table, written once for every store.

Each operation reads a mapping and returns ``(result, writes)``; ``writes`` lists ``(key, value)``
pairs to apply, a value of None deleting the key. HashStore applies them to its dict, FileStore appends
them to its file, and TCPStore's server runs them on a HashStore, so all stores agree by construction.
"""


def set_(table, key, value):
    return None, [(key, value)]


def multi_set(table, keys, values):
    return None, list(zip(keys, values))


def append(table, key, value):
    return None, [(key, table.get(key, b"") + value)]


def add(table, key, amount):
    old = table.get(key, b"0")
    try:
        new = int(old) + amount
    except ValueError:
        raise ValueError(f"store.add({key!r}, {amount}): the key holds {old!r}, not an integer") from None
    return new, [(key, str(new).encode())]


def compare_set(table, key, expected, desired):
    """Set ``desired`` if the key holds ``expected`` (or is absent and ``expected`` is empty); return
    the value the key holds afterwards, or ``expected`` when the key is absent and stays so (torch's)."""
    current = table.get(key)
    if current is None:
        return (desired, [(key, desired)]) if expected == b"" else (expected, [])
    if current == expected:
        return desired, [(key, desired)]
    return current, []


def delete_key(table, key):
    return (True, [(key, None)]) if key in table else (False, [])


def get(table, keys):
    return [table[k] for k in keys], []


def check(table, keys):
    return all(k in table for k in keys), []


def num_keys(table):
    return len(table), []


def list_keys(table):
    return list(table), []


OPS = {"set": set_, "multi_set": multi_set, "append": append, "add": add, "compare_set": compare_set,
       "delete_key": delete_key, "get": get, "check": check, "num_keys": num_keys, "list_keys": list_keys}


def apply(table: dict, writes) -> None:
    for key, value in writes:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
