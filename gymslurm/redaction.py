"""The one redaction rule: no secret reaches anything gymslurm writes or prints.

Two nets, applied in this order by :func:`redact_text` (text) and :func:`redact_value` (plain data):

1. **By value.** Every secret this process has learned (:func:`learn`, :func:`learn_environment`)
   is replaced wherever it appears, whatever surrounds it: a key echoed by a server in its error
   text ("Incorrect API key provided: V"), a value inside another assignment, a Hydra or pydantic
   error that repeats an override. A process learns the secrets of its configuration once it is
   composed (values under credential-named keys at any depth, the value of every :data:`SHAPES`
   match) and of its environment (values of credential-named variables, shapes in the others).
   The store applies the same table to every byte it writes (:func:`scrub_bytes`).
2. **By shape.** :data:`SHAPES`, the one table of the forms a credential takes in a string (URL
   userinfo, ``Authorization:`` lines, Bearer/Basic, ``NAME=V``, ``--flag V``, name/value pairs,
   ``name: V``, quoted pairs, a key quoted in prose). It catches a secret no process was told.

Credential *names* (``api_key``, ``HF_TOKEN``, ``db_pass``, ``Authorization``...) are decided by
:func:`is_credential_name`. Trade-offs: redaction errs towards redacting (a false positive only
hides a value); a learned value shorter than :data:`MIN_LEARNED_CHARS` characters is left to the
shapes (replacing a 3-letter word everywhere would corrupt results); literal task data
(``task_input``, ``tasks``...) is never redacted by name, only by value.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

REDACTED = "<redacted>"


def _table(words: str) -> frozenset[str]:
    """A table of names written as one space-separated string (easy to read and to extend)."""
    return frozenset(words.split())


# --------------------------------------------------------------------------------------------------
# Names. A name is split into lower-case words: "OPENAI_API_KEY", "openaiApiKey", "X-Api-Key" and
# "openai.api_key" all give [..., "api", "key"]. The rules look at the last word(s).
# --------------------------------------------------------------------------------------------------

# The last word of a credential name (HF_TOKEN, client_secret, db_password, db_pass, basic_auth...).
CREDENTIAL_LAST_WORDS = _table(
    "token secret secrets password passwd pass pwd passphrase credential credentials apikey auth "
    "authorization cookie webhook"  # a webhook URL is its receiver's only credential (launcher notify:)
)
# "<word>_key" is a credential for these words only: api_key, access_key, private_key; not sort_key.
CREDENTIAL_KEY_QUALIFIERS = _table("api access private secret auth signing encryption ssh")
# "<word>_token" that is a tokenizer's token, not a credential: eos_token, pad_token, stop_token.
TOKENIZER_QUALIFIERS = _table("eos bos pad unk stop sep cls mask special start end")
# "<word>_tokens" that counts or lists a model's tokens, not credentials: max_tokens, prompt_tokens.
TOKEN_COUNT_QUALIFIERS = _table(
    "max min num total prompt completion input output new generated reasoning cached added extra thinking"
)
# A plural of these is a credential name as the singular is (API_KEYS, HF_TOKENS, passwords,
# cookies); "passes" is not (num_passes): only an "s" added to the whole word counts. A bare
# "tokens" is not either: in replies and configs it counts or lists a model's tokens.
_PLURAL_SINGULARS = CREDENTIAL_LAST_WORDS | {"token", "key"}
# Subtrees of literal task data: no name-based redaction below them, and every key there is semantic.
TASK_DATA_KEYS = _table("task tasks task_input task_inputs task_params task_parameters")

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")


def name_words(name: object) -> list[str]:
    """``"openaiApiKey"`` → ``["openai", "api", "key"]``; separators are anything but letters and digits."""
    spaced = _CAMEL_BOUNDARY.sub("_", str(name))
    return [word for word in _WORD_SEPARATORS.split(spaced.lower()) if word]


def is_credential_name(name: object) -> bool:
    """Whether a setting, header, environment variable or flag of this name holds a credential."""
    stems = (word.rstrip("0123456789") for word in name_words(name))  # SECRET_TOKEN_2, api_key2
    words = [stem for stem in stems if stem]
    if not words:
        return False
    *head, last = words
    plural = last.endswith("s") and last[:-1] in _PLURAL_SINGULARS
    if plural:
        last = last[:-1]
    if last == "token" and plural:  # a bare "tokens" counts or lists a model's tokens (a result's tokens: 12)
        return bool(head) and head[-1] not in TOKENIZER_QUALIFIERS | TOKEN_COUNT_QUALIFIERS
    if last == "token":
        return not head or head[-1] not in TOKENIZER_QUALIFIERS
    if last == "key":
        return bool(head) and head[-1] in CREDENTIAL_KEY_QUALIFIERS
    return last in CREDENTIAL_LAST_WORDS


def opens_task_data(key: object) -> bool:
    """Whether this key holds literal task data (``task_input``, ``tasks``, ``task_params``...)."""
    return "_".join(name_words(key)) in TASK_DATA_KEYS


# --------------------------------------------------------------------------------------------------
# Interpolations: ``${...}`` spans, found with brace matching so nested ones are seen.
# --------------------------------------------------------------------------------------------------

_ENV_BODY = re.compile(r"\s*(?:oc\.)?env\s*:\s*['\"]?([^,'\"\s}]+)['\"]?\s*(?:,.*)?", re.DOTALL)
_NODE_BODY = re.compile(r"\s*\.*([\w\-\[\]]+(?:\.[\w\-\[\]]+)*)\s*")


def _span_end(text: str, start: int) -> int | None:
    """The index just past the ``}`` closing the interpolation opened at ``text[start:start+2] == "${"``."""
    depth = 0
    for index in range(start + 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return index + 1
    return None


def rewrite_interpolations(text: str, rewrite: Callable[[str], str | None]) -> str:
    """Replace each ``${body}`` for which ``rewrite(body)`` gives a string; look inside the others."""
    out: list[str] = []
    index = 0
    while (start := text.find("${", index)) >= 0:
        end = _span_end(text, start)
        if end is None:
            break
        escaped = text[start - 1 : start] == "\\"
        replacement = None if escaped else rewrite(text[start + 2 : end - 1])
        if replacement is None:  # keep "${" and look inside it for nested interpolations
            out.append(text[index : start + 2])
            index = start + 2
        else:
            out.append(text[index:start] + replacement)
            index = end
    out.append(text[index:])
    return "".join(out)


def referenced_name(body: str) -> tuple[str, str] | None:
    """``("env", "HF_TOKEN")`` for ``oc.env:HF_TOKEN``, ``("node", "api_key")`` for ``a.b.api_key``."""
    if match := _ENV_BODY.fullmatch(body):
        return "env", match.group(1)
    if match := _NODE_BODY.fullmatch(body):
        return "node", re.sub(r"\[.*?\]", "", match.group(1)).rsplit(".", 1)[-1]
    return None


def _redact_interpolation(body: str) -> str | None:
    """A credential-named environment variable is replaced, so resolution never reads it."""
    reference = referenced_name(body)
    if reference and reference[0] == "env" and is_credential_name(reference[1]):
        return REDACTED
    return None


# --------------------------------------------------------------------------------------------------
# Shapes: the one table of the forms a credential takes inside a string.
# --------------------------------------------------------------------------------------------------

# A value: quoted pieces ("..." with escapes, '...') and bare characters up to whitespace or & ; ,
# (a quote inside a bare value does not end it: api_key=ab"cd is one value).
_VALUE = r"(?:\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s&;,\"'])(?:\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s&;,])*"
# A flow mapping or list (two levels deep) under a credential-named key is the secret whole:
# ``credentials={user: bob, secret_value: V}`` keeps no part of it.
_STRUCTURE = r"\{(?:[^{}]|\{[^{}]*\})*\}|\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
_FLOW_VALUE = (
    r"\{[^{}]*\}|\[[^\[\]]*\]|'[^']*'|\"(?:[^\"\\]|\\.)*\"|(?![\w\-]+\s+<redacted>)"
    r"(?!(?i:bearer|basic)\s)[^\s,{}\[\]'\"]+"
)


@dataclass(frozen=True)
class Shape:
    """One form of a credential in a string: ``pattern`` matches it, group ``value`` is the secret.

    ``name``: the group holding a name that must be a credential name (``api_key`` in ``api_key=V``);
    when it is not, the search goes on just after the name, so an outer assignment never swallows an
    inner one (``base_url=http://h/v1?api_key=V``). ``check``: a further test of the match.
    """

    label: str
    pattern: re.Pattern[str]
    value: str = "value"
    name: str | None = None
    check: Callable[[re.Match[str]], bool] | None = None


def _is_basic_credential(match: re.Match[str]) -> bool:
    """HTTP Basic carries base64("user:password"); prose such as "Basic arithmetic" does not decode so."""
    try:
        return b":" in base64.b64decode(match.group("value"), validate=True)
    except (binascii.Error, ValueError):
        return False


# A known scheme stays readable (Authorization: Token <redacted>); any other word is part of the secret.
_AUTH_SCHEMES = r"(?:bearer|basic|token|digest|negotiate|ntlm|hawk|apikey|api-key|key|jwt|oauth|ssws|mac)\s+"
_SCHEME = r"\b[A-Za-z][A-Za-z0-9+.\-]*://"
SHAPES: tuple[Shape, ...] = (
    Shape("URL password", re.compile(_SCHEME + r"[^\s/@:]*:(?P<value>[^\s/@]+)@")),
    Shape("URL user as token", re.compile(_SCHEME + r"(?P<value>[^\s/@:]+)@")),
    # An Authorization line: everything after the colon, whatever the scheme (Token, Digest, Bearer...).
    Shape(
        "Authorization header",
        re.compile(
            r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:"
            + _AUTH_SCHEMES
            + r")?(?P<value>(?![^\r\n\"',;}\]]*<redacted>)[^\s\"',;}\]]"
            r"(?:[^\r\n\"',;}\]]*[^\s\"',;}\]])?)"
        ),
    ),
    Shape("Bearer", re.compile(r"(?i)\bbearer\s+(?P<value>(?!<redacted>)[A-Za-z0-9\-._~+/]+=*)")),
    Shape(
        "Basic",
        re.compile(r"(?i)\bbasic\s+(?P<value>[A-Za-z0-9+/]+={0,2})(?![A-Za-z0-9+/=])"),
        check=_is_basic_credential,
    ),
    Shape(
        "NAME=V",
        re.compile(
            r"(?<![\w.\-])(?P<name>-{0,2}[A-Za-z_][\w.\-]*)=(?P<value>" + _STRUCTURE + "|" + _VALUE + ")"
        ),
        name="name",
    ),
    Shape(
        "--flag V",
        re.compile(r"(?<![\w\-])(?P<name>--?[A-Za-z][\w\-]*)(?:=\s+|\s+)(?!-)(?P<value>" + _VALUE + ")"),
        name="name",
    ),
    Shape(
        "name/value pair",
        re.compile(
            r"\bname\s*[:=]\s*[\"']?(?P<name>[\w\-.]+)[\"']?\s*,\s*value\s*[:=]\s*"
            r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s&;,\"'}\]]+)"
        ),
        name="name",
    ),
    Shape(
        "quoted pair",
        re.compile(r"([\"'])(?P<name>[\w\-.]+)\1\s*:\s*(?P<value>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')"),
        name="name",
    ),
    Shape(
        "name: V",
        re.compile(r"(?<![\w\-.])(?P<name>[A-Za-z_][\w\-.]*)\s*:(?!//)\s*(?P<value>" + _FLOW_VALUE + ")"),
        name="name",
    ),
    Shape(
        "a key quoted in prose",
        re.compile(
            r"(?i)\b(?:api[\s_-]?key|access[\s_-]?token|token|password|secret)\s+(?:provided|given|used|sent|"
            r"received|supplied)\s*:?\s*[\"']?(?P<value>[^\s\"',]+)"
        ),
    ),
)


# A value that only refers to a variable (shell ``$X``/``${X}``, OmegaConf ``${node}``) holds no secret.
_REFERENCE = re.compile(r"\$\{?[A-Za-z_]\w*\}?|\$\{[^{}\s]*\}")


def _parts(secret: str) -> list[str]:
    """A matched secret and what a server could repeat of it: unescaped, and each value of a flow
    mapping or list (``{anything: V}`` under ``secrets:``)."""
    parts = [secret, secret.replace('\\"', '"')]
    if secret[:1] in "{[":  # every leaf, however deep: {user: bob, vault: {value: V}}
        for piece in re.split(r"[{}\[\],]", secret):
            parts.append(piece.split(":", 1)[-1].strip().strip("'\""))
    return parts


def _apply(shape: Shape, text: str, found: list[str] | None) -> str:
    """``text`` with every match of ``shape`` redacted (its quotes kept, so redacting twice is a no-op)."""
    out: list[str] = []
    index = position = 0
    while (match := shape.pattern.search(text, position)) is not None:
        if shape.name is not None and not is_credential_name(match.group(shape.name)):
            position = match.end(shape.name)  # look again after the name: an inner assignment counts
            continue
        if shape.check is not None and not shape.check(match):
            position = match.start() + 1
            continue
        start, end = match.span(shape.value)
        if end - start >= 2 and text[start] in "\"'" and text[end - 1] == text[start]:
            start, end = start + 1, end - 1
        secret = text[start:end]
        if _REFERENCE.fullmatch(secret):  # api_key=${X_API_KEY}: a reference names a secret, holds none
            position = end
            continue
        if secret != REDACTED and found is not None:
            found.extend(_parts(secret))
        out.append(text[index:start] + REDACTED)
        index = position = max(end, match.start() + 1)
    out.append(text[index:])
    return "".join(out)


def _scrub_shapes(text: str, found: list[str] | None = None) -> str:
    text = rewrite_interpolations(text, _redact_interpolation)
    for shape in SHAPES:
        text = _apply(shape, text, found)
    return text


# --------------------------------------------------------------------------------------------------
# Values: the secrets this process learned, replaced wherever they appear.
# --------------------------------------------------------------------------------------------------

MIN_LEARNED_CHARS = 6
_NOT_SECRETS = _table("true false none null yes no redacted")
_known: dict[str, None] = {}  # every spelling of every learned secret, longest first
_known_bytes: list[bytes] = []


def _spellings(secret: str) -> set[str]:
    """A secret as text, inside JSON (escaped) and inside a URL (percent-encoded)."""
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quote(secret, safe=""),
    }


def _derived(secret: str) -> list[str]:
    """What a server may echo of a secret besides itself: each line of a multi-line one (a PEM key's
    body), each leaf of a flow structure (what ``${oc.decode:...}`` makes of it), and its base64
    (standard and URL-safe, padded or not: an Authorization header, a Kubernetes secret)."""
    pieces = [secret]
    if "\n" in secret:
        pieces += [line.strip() for line in secret.splitlines() if not line.strip().startswith("-----")]
    if secret[:1] in "{[":
        pieces += _leaf_values(secret)
    encoded = secret.encode()
    for b64 in (base64.b64encode(encoded).decode(), base64.urlsafe_b64encode(encoded).decode()):
        pieces += [b64, b64.rstrip("=")]
    return pieces


def _leaf_values(text: str) -> list[str]:
    """The scalar values (never the keys) of a flow structure, as ``${oc.decode:...}`` would read it;
    none when it does not parse (then only the whole is learned)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    found: list[str] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item is not None and not isinstance(item, bool):
            found.append(str(item))
    return found


def _learnable(secret: object) -> bool:
    return (
        isinstance(secret, str)
        and len(secret.strip()) >= MIN_LEARNED_CHARS
        and REDACTED not in secret
        and not _REFERENCE.fullmatch(secret.strip())  # ${X}: names a secret, holds none
        and secret.strip().lower() not in _NOT_SECRETS
    )


def remember(secrets: Iterable[str]) -> None:
    """Learn secret values: from now on they are replaced wherever this process writes or prints them,
    with what a server may echo of them (:func:`_derived`)."""
    new = {
        spelling
        for secret in secrets
        if _learnable(secret)
        for piece in _derived(secret.strip())
        if _learnable(piece)
        for spelling in _spellings(piece.strip())
    }
    new -= _known.keys()
    if not new:
        return
    ordered = sorted([*_known, *new], key=len, reverse=True)
    _known.clear()
    _known.update(dict.fromkeys(ordered))
    _known_bytes[:] = [spelling.encode() for spelling in ordered]


def forget_all() -> None:
    """Forget every learned secret (tests)."""
    _known.clear()
    _known_bytes.clear()


def secrets_in(value: Any) -> list[str]:
    """Every secret :func:`redact_value` would remove from ``value`` (values, not names)."""
    found: list[str] = []
    _redact(value, in_task_data=False, found=found)
    return found


def learn(value: Any) -> None:
    """Learn every secret of a configuration (plain data or text): credential-named values, shapes."""
    remember(secrets_in(value))


# Variables every shell sets whose names look like credentials (PWD: the working directory).
_SHELL_VARIABLES = frozenset({"PWD", "OLDPWD"})


def learn_environment(environ: Mapping[str, str]) -> None:
    """Learn the secrets of an environment: credential-named variables' values, shapes in the others,
    and the secrets gymslurm's own channels carry (JSON of the secrets bundle and the overrides)."""
    for name, value in environ.items():
        if name in _SHELL_VARIABLES:
            continue
        if is_credential_name(name):
            remember([value])
        elif name.startswith("GYMSLURM_") and value[:1] in "[{":
            try:
                learn(_bundle_values(json.loads(value)))
            except ValueError:
                learn(value)
        else:
            learn(value)


def _bundle_values(data: Any) -> Any:
    """The secrets bundle ``{"path": original}``: each original is wholly secret-bearing."""
    if isinstance(data, dict):
        remember(str(item) for item in data.values() if isinstance(item, str))
        return list(data.values())
    return data


def scrub_text(text: str) -> str:
    """``text`` with every learned secret replaced (by value only: what a stream prints)."""
    return _scrub_known(text)


def _scrub_known(text: str) -> str:
    for secret in _known:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


_Bytes = TypeVar("_Bytes", bytes, bytearray)


def scrub_bytes(data: _Bytes) -> _Bytes:
    """``data`` with every learned secret replaced (the store's net over every byte it writes); the
    same object when it holds none."""
    for secret in _known_bytes:
        if secret in data:
            data = data.replace(secret, REDACTED.encode())
    return data


# --------------------------------------------------------------------------------------------------
# The one function.
# --------------------------------------------------------------------------------------------------


def redact_text(text: str) -> str:
    """Any text (a message, a log line, an override, a URL) with every secret removed: by value, then
    by shape (:data:`SHAPES`)."""
    return _scrub_shapes(_scrub_known(text))


def redact_shapes(text: str) -> str:
    """``text`` with every credential found by its shape removed (:data:`SHAPES`), learned ones aside:
    the same in every process."""
    return _scrub_shapes(text)


def redact_value(value: Any) -> Any:
    """A plain value (mapping, list, string...) with every credential redacted: by value, by name and
    by shape."""
    return _redact(value, in_task_data=False, found=None)


def redact_credentials(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the mapping ``raw`` with every credential replaced by :data:`REDACTED`; idempotent."""
    return _redact_mapping(raw, in_task_data=False, found=None)


_FLAG_ITEM = re.compile(r"--?[A-Za-z][\w\-]*=?")


def _is_credential_flag(item: object) -> bool:
    """``--api-key`` or ``--api-key=`` as one list item: the next item is its value."""
    return isinstance(item, str) and bool(_FLAG_ITEM.fullmatch(item)) and is_credential_name(item)


def _redact(value: Any, in_task_data: bool, found: list[str] | None) -> Any:
    if isinstance(value, Mapping):
        return _redact_mapping(value, in_task_data, found)
    if isinstance(value, list | tuple):
        items = [_redact(item, in_task_data, found) for item in value]
        if not in_task_data:  # an argv: ["--api-key", "V"] carries V as the item after its flag
            for index in range(1, len(items)):
                if _is_credential_flag(value[index - 1]) and isinstance(items[index], str):
                    _found_whole(value[index], found)
                    items[index] = REDACTED
        return items
    if isinstance(value, str):
        if in_task_data:
            return _scrub_known(rewrite_interpolations(value, _redact_interpolation))
        return _scrub_shapes(_scrub_known(value), found)
    return value


def _found_whole(value: Any, found: list[str] | None) -> None:
    """Record every string below a value that is wholly a credential."""
    if found is None:
        return
    if isinstance(value, str):
        if "${" not in value:
            found.append(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _found_whole(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _found_whole(item, found)


def _redact_mapping(
    mapping: Mapping[Any, Any], in_task_data: bool, found: list[str] | None
) -> dict[Any, Any]:
    named_credential = not in_task_data and _is_name_value_credential(mapping)
    out: dict[Any, Any] = {}
    for key, value in mapping.items():
        if not in_task_data and (is_credential_name(key) or (named_credential and key == "value")):
            _found_whole(value, found)
            out[key] = REDACTED
        else:
            out[key] = _redact(value, in_task_data or opens_task_data(key), found)
    return out


def _is_name_value_credential(mapping: Mapping[Any, Any]) -> bool:
    """``{name: HF_TOKEN, value: ...}`` (a Kubernetes/Slurm-style environment entry)."""
    return "value" in mapping and isinstance(mapping.get("name"), str) and is_credential_name(mapping["name"])
