"""What a benchmark value may contain when it reaches a rendered job script. Pure.

A job script is bash, and its ``#SBATCH`` lines are read by ``sbatch``: a newline in a value ends
the line it lands on and the rest runs as a command inside the job (and a non-``#SBATCH`` line
also ends sbatch's directive parsing, silently dropping every later directive). So every value
that reaches a script is checked here, once, at the settings boundary (``launcher/settings.py``
calls these from its validators; ``site/render.py`` checks its single-line slots again):

* no value anywhere in a benchmark may hold a NUL (it cannot reach a process at all);
* no value that reaches a script may hold a newline or another control character;
* names that become paths and job names (the benchmark's ``name``, ``output_stem``, a server's
  ``name``) are *slugs*: letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit, so
  a run directory is always inside ``run_root`` (no ``/``, no ``..``, no spaces);
* ``#SBATCH`` values (partition, account, qos, ``extra_directives``, the paths of ``--output``)
  carry only what sbatch takes in a directive: no whitespace inside a value, no quotes, ``$``,
  backticks, ``;``, ``\\``, ``<``, ``>``, ``(``, ``)`` or ``#``.

``slurm.env_setup`` lines are the user's own shell on purpose: they run exactly as written, one
line each (a newline inside one item is refused, so one item is one line). Values that land in a
command (the collector's argv, ``slurm.python``, the work directory) are shell-quoted by
``render.command_line`` / ``render.render``, never pasted.

Every refusal names the key, the offending character (escaped, with its code point) and its
position, and never repeats the value itself (it may be a secret put in the wrong place).
"""

from __future__ import annotations

import re

__all__ = [
    "control_problem",
    "directive_problem",
    "extra_directive_problem",
    "nul_problem",
    "path_directive_problem",
    "slug_problem",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_EXCEPT_TAB = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SLUG_MAX = 100
# A partition, account or qos name (a comma-separated list of them for partition).
_DIRECTIVE_NAME = re.compile(r"[A-Za-z0-9_.,+-]+")
# What may follow "--flag=" in an extra directive: no whitespace, quotes or shell/sbatch syntax.
_DIRECTIVE_VALUE_BAD = re.compile(r"[\s\"'`$;\\<>()#]")
_DIRECTIVE_FLAG = re.compile(r"(--[A-Za-z][A-Za-z0-9-]*|-[A-Za-z])")
# A path inside "#SBATCH --output=...": sbatch splits on whitespace and expands "%" patterns.
_PATH_BAD = re.compile(r"[\s\"'`$;\\<>()#%]")


def _describe(char: str) -> str:
    names = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL", "\t": "a tab", " ": "a space"}
    return f"{names.get(char, repr(char))} (U+{ord(char):04X})"


def _at(key: str, value: str, index: int, what: str) -> str:
    return f"{key} contains {_describe(value[index])} at position {index}; {what}"


def nul_problem(key: str, value: str) -> str | None:
    """Why ``value`` cannot be passed to any process (it holds a NUL), else None."""
    index = value.find("\x00")
    return None if index < 0 else _at(key, value, index, "no setting may hold a NUL character")


def control_problem(key: str, value: str, *, allow_tab: bool = False) -> str | None:
    """Why ``value`` cannot land on one line of a job script (a newline or control character), else None."""
    match = (_CONTROL_EXCEPT_TAB if allow_tab else _CONTROL).search(value)
    if match is None:
        return None
    return _at(
        key,
        value,
        match.start(),
        "values that reach a job script must be one line without control characters",
    )


def slug_problem(key: str, value: str) -> str | None:
    """Why ``value`` is not a safe name for a folder, file or job (``a/b``, ``..``, ``a b``), else None."""
    if _SLUG.fullmatch(value) and len(value) <= SLUG_MAX and value not in (".", ".."):
        return None
    if not value:
        return f"{key} is empty; it must be a name of letters, digits, '.', '_' or '-'"
    bad = next((i for i, c in enumerate(value) if not re.fullmatch(r"[A-Za-z0-9._-]", c)), None)
    if bad is not None:
        return _at(
            key, value, bad, "it must be a name of letters, digits, '.', '_' or '-' (it names a folder)"
        )
    if len(value) > SLUG_MAX:
        return f"{key} is {len(value)} characters long; at most {SLUG_MAX} are allowed"
    return f"{key} must start with a letter or a digit (it names a folder inside run_root)"


def directive_problem(key: str, value: str) -> str | None:
    """Why ``value`` is not a partition, account or qos name sbatch takes, else None."""
    if _DIRECTIVE_NAME.fullmatch(value):
        return None
    if not value:
        return f"{key} is empty; leave it null to use the cluster's default"
    bad = next(i for i, c in enumerate(value) if not _DIRECTIVE_NAME.fullmatch(c))
    return _at(key, value, bad, "a Slurm name holds only letters, digits, '_', '.', '-', '+' and ','")


def extra_directive_problem(key: str, value: str) -> str | None:
    """Why ``value`` is not one ``#SBATCH`` option (``--mem=4G``, ``--gres gpu:1``, ``-N 1``), else None."""
    if problem := control_problem(key, value):
        return problem
    line = value.strip()
    body = line[len("#SBATCH") :].strip() if line.startswith("#SBATCH") else line
    match = _DIRECTIVE_FLAG.match(body)
    if match is None:
        return f"{key} must be one sbatch option starting with '-' or '--' (e.g. --mem=4G)"
    if _names_the_job(match.group(1)):
        return (
            f"{key} sets the job's name ({match.group(1)}): gymslurm names every job of a run gs-<run> "
            "(status, cancel and the links find the run's jobs by that name); remove the line"
        )
    rest = body[match.end() :]
    if rest[:1] in ("=", " "):
        rest = rest[1:].lstrip(" ") if rest[:1] == " " else rest[1:]
    elif rest:
        return f"{key} must be one sbatch option: --flag, --flag=value or --flag value"
    if bad := _DIRECTIVE_VALUE_BAD.search(rest):
        lead = len(value) - len(value.lstrip())
        index = lead + len(line) - len(rest) + bad.start()  # rest is a suffix of the stripped line
        return _at(
            key,
            value,
            index,
            "an #SBATCH value may not hold whitespace, quotes or any of $ ` ; \\ < > ( ) #",
        )
    return None


def _names_the_job(flag: str) -> bool:
    """``-J`` or ``--job-name`` (or a prefix of it, which sbatch's option parser also takes)."""
    return flag == "-J" or (len(flag) > len("--j") and "--job-name".startswith(flag))


def path_directive_problem(key: str, value: str) -> str | None:
    """Why a path cannot appear in an ``#SBATCH --output=`` line (whitespace, quotes, ``%``...), else None."""
    if bad := _PATH_BAD.search(value):
        return _at(
            key,
            value,
            bad.start(),
            "the run directory's path appears in #SBATCH lines, which cannot hold whitespace, quotes, '%' "
            "or any of $ ` ; \\ < > ( ) #; choose a run_root (or work directory) without them",
        )
    return control_problem(key, value)


# Linux's PATH_MAX is 4096 with the run's own folders and files below run_root; a name is 255 bytes.
MAX_ROOT_CHARS = 3000
MAX_NAME_BYTES = 255


def path_length_problem(key: str, path: str) -> str | None:
    """Why ``path`` cannot hold a run (too long for the filesystem), or None."""
    if len(path) > MAX_ROOT_CHARS:
        return (
            f"{key} is {len(path)} characters long; a run's files live below it and a path may not exceed "
            f"4096 bytes: use a path of at most {MAX_ROOT_CHARS} characters"
        )
    longest = max((part for part in path.split("/")), key=lambda part: len(part.encode()), default="")
    if len(longest.encode()) > MAX_NAME_BYTES:
        return (
            f"{key} has a folder name of {len(longest.encode())} bytes; a filesystem takes at most "
            f"{MAX_NAME_BYTES}: shorten it"
        )
    return None
