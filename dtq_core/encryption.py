"""Encrypted payloads and results (docs/security.md, "Encrypted payloads").

With DTQ_ENCRYPTION_KEYS (Fernet keys: the first encrypts, every one decrypts, so a key is rotated
by putting a new one first) and DTQ_ENCRYPT_TYPES (task types, or "*" for all), the payload of such
a task is encrypted at submit and its result when its handler returns, with cryptography's
MultiFernet (AES-128-CBC with HMAC-SHA256, a timestamped token). Redis then holds, where the JSON
was, a JSON string "dtq-encrypted:<token>" whose plaintext is that JSON. A JSON string keeps
every place that concatenates or copies JSON valid (a workflow's inputs are built from its steps'
results).

Decryption happens where a key is configured: the worker, before it hands the payload or a
workflow step's input to the handler; the API, console and CLI, to show the plaintext. A process
without a key that decrypts shows the word "encrypted" instead, and a worker fails the attempt
with dtq.DecryptionFailed (permanent: no retry can bring a key back).

Only a task of an encrypted type is decrypted. Submit is open and a token is not bound to its
task: anyone who read a token out of Redis could submit it as the payload of a plain type, and a
worker that decrypted whatever starts with the prefix would hand the plaintext to that handler,
whose result is stored in clear. A plain type's payload, result and inputs are what they are,
whatever they start with.
"""

from __future__ import annotations

import base64
import functools
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

PREFIX = "dtq-encrypted:"
SHOWN = "encrypted"  # what a process without the key shows for a payload or a result


class DecryptionFailed(Exception):
    """No configured key decrypts the token: the key it was made with is not in DTQ_ENCRYPTION_KEYS."""


def check_keys(keys: tuple[str, ...]) -> str | None:
    """What is wrong with DTQ_ENCRYPTION_KEYS (for the one-line config error), or None."""
    for i, key in enumerate(keys, 1):
        try:
            Fernet(key)
        except (ValueError, TypeError):
            return (f"DTQ_ENCRYPTION_KEYS: key {i} is not a Fernet key (32 url-safe base64-encoded bytes; make one "
                    f"with: python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')")
    return None


@functools.lru_cache(maxsize=8)
def cipher(keys: tuple[str, ...]) -> MultiFernet | None:
    return MultiFernet([Fernet(k) for k in keys]) if keys else None


_current: tuple[str, ...] = ()  # the keys this process reveals with (configure)
_types: tuple[str, ...] = ()  # the types it encrypts, when it knows them (configure)


def configure(keys: tuple[str, ...], types: tuple[str, ...] = ()) -> None:
    """The keys the API, console and CLI of this process decrypt with, and the types it encrypts
    (DTQ_ENCRYPT_TYPES; empty: not known here, as on a web node given no key)."""
    global _current, _types
    _current, _types = keys, types


def encrypts(types: tuple[str, ...], task_type: str) -> bool:
    return bool(types) and ("*" in types or task_type in types)


def seal(keys: tuple[str, ...], json_text: str) -> str:
    """JSON text -> the JSON string that stands for it, encrypted with the first key."""
    f = cipher(keys)
    assert f is not None, "seal needs DTQ_ENCRYPTION_KEYS (checked at configuration)"
    return json.dumps(PREFIX + f.encrypt(json_text.encode()).decode())


def is_sealed(value: Any) -> bool:
    """Whether the value starts like a sealed one; only a task of an encrypted type is one."""
    return type(value) is str and value.startswith(PREFIX)


def token_shaped(value: str) -> bool:
    """Whether what follows the prefix can be a Fernet token (version byte 0x80, timestamp, IV, whole
    AES blocks, HMAC), which a process without the key can tell: "dtq-encrypted:see the docs" is not."""
    try:
        raw = base64.b64decode(value[len(PREFIX):], altchars=b"-_", validate=True)
    except ValueError:  # binascii.Error, or a character that is not ASCII
        return False
    return len(raw) >= 73 and (len(raw) - 57) % 16 == 0 and raw[0] == 0x80


def unseal(keys: tuple[str, ...], value: str) -> Any:
    """A sealed value (already JSON-decoded: the "dtq-encrypted:..." string) -> the value it stands for."""
    f = cipher(keys)
    if f is None:
        raise DecryptionFailed("the value is encrypted and DTQ_ENCRYPTION_KEYS is empty")
    try:
        return json.loads(f.decrypt(value[len(PREFIX):].encode()))
    except InvalidToken:
        raise DecryptionFailed("no key in DTQ_ENCRYPTION_KEYS decrypts it (was the key it was encrypted with "
                               "removed?)") from None


def sealed_with_first(keys: tuple[str, ...], value: str) -> bool:
    """Whether the first key (the one that encrypts) made this token, not an older one."""
    first = cipher(keys[:1])
    if first is None:
        return False
    try:
        first.decrypt(value[len(PREFIX):].encode())
    except InvalidToken:
        return False
    return True


def unseal_inputs(keys: tuple[str, ...], value: Any) -> Any:
    """A workflow step's input: a result, or lists of results; each sealed one decrypted. Only for
    a step of an encrypted type: a plain step before it may have returned a stolen token."""
    if is_sealed(value):
        return unseal(keys, value)
    if isinstance(value, list):
        return [unseal_inputs(keys, v) for v in value]
    return value


def reveal(value: Any, task_type: str | None = None) -> tuple[Any, bool]:
    """(what to show, whether it was encrypted) for a decoded payload or result of a task of
    task_type, with this process's keys: the plaintext value, or the word "encrypted" when no key
    decrypts it. A plain type's value, and one that cannot be a token, is shown as it is."""
    if not is_sealed(value):
        return value, False
    # A process given no key does not know which types are encrypted: the token's shape decides.
    if task_type is not None and _types and not encrypts(_types, task_type):
        return value, False
    if not token_shaped(value):
        return value, False
    try:
        return unseal(_current, value), True
    except DecryptionFailed:
        return SHOWN, True
