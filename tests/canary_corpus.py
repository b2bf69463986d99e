"""The canary corpus (issue 20): every form a credential takes in a string, each with its own canary.

A form is a text carrying a canary, and the needle that must never be found (the canary itself,
or its base64 spelling inside a Basic credential). Both the unit test of the one redaction rule
(tests/unit/test_redaction_corpus.py) and the e2e canary suite (tests/e2e/test_canary_corpus.py:
each form in a benchmark file and on a submit command line) use this list. Issue 10's and issue
20's forms are all here; the names of the environment keys that carry them (``CORPUS_NN``) are
not credential names, so only the value's shape (or, later, its learned value) protects it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass


@dataclass(frozen=True)
class Form:
    """One credential form: ``text`` holds ``needle``, which nothing gymslurm writes may contain."""

    label: str
    text: str
    needle: str
    secret: str = ""  # the whole secret (what a server would echo), when more than the needle

    @property
    def echoed(self) -> str:
        """The secret as a server would repeat it in its own error text."""
        return self.secret or self.needle


def _canary(index: int) -> str:
    return f"CNRY{index:02d}x{(index * 7919) % 10007:05d}q"


def _basic(secret: str) -> str:
    return base64.b64encode(f"alice:{secret}".encode()).decode()


_TEMPLATES: list[tuple[str, str]] = [
    ("NAME=V", "api_key={c}"),
    ("upper NAME=V", "API_KEY={c}"),
    ("vendor variable", "OPENAI_API_KEY={c}"),
    ("export line", "export OPENAI_API_KEY={c}"),
    ("HF token", "HF_TOKEN={c}"),
    ("db_password", "db_password={c}"),
    ("pass as a name", "db_pass={c}"),
    ("pwd as a name", "pwd={c}"),
    ("passwd", "passwd={c}"),
    ("client_secret", "client_secret={c}"),
    ("--api-key V", "serve --api-key {c} --port 1"),
    ("--api-key=V", "serve --api-key={c}"),
    ("--token V", "--token {c}"),
    ("--password=V", "--password={c}"),
    ("--api-key= V (split)", "--api-key= {c}"),
    ("Authorization Bearer", "Authorization: Bearer {c}"),
    ("Authorization Token", "Authorization: Token {c}"),
    ("Authorization bare", "Authorization: {c}"),
    ("authorization no space", "authorization:{c}"),
    ("Proxy-Authorization Digest", "Proxy-Authorization: Digest {c}"),
    ("X-Api-Key: V", "X-Api-Key: {c}"),
    ("X-Api-Key:V", "X-Api-Key:{c}"),
    ("x-api-key=V", "x-api-key={c}"),
    ("Bearer in prose", "call it with Bearer {c} please"),
    ("URL password", "https://user:{c}@host.example/x"),
    ("DSN password", "postgres://app:{c}@db:5432/x"),
    ("URL user as token", "https://{c}@host.example/repo.git"),
    ("query api_key", "http://h/v1?api_key={c}"),
    ("query access_token", "http://h/v1?x=1&access_token={c}"),
    ("inside --comment", "--comment=api_key={c}"),
    ("DSN query password", "export DB_URL=postgres://h/db?password={c}"),
    ("nested override", "+environment_config.policy.base_url=http://h/v1?api_key={c}"),
    ("flow mapping", "{{api_key: {c}}}"),
    ("nested flow mapping", "{{judge: {{api_key: {c}}}}}"),
    ("JSON pair", '{{"api_key": "{c}"}}'),
    ("python dict", "{{'token': '{c}'}}"),
    ("YAML double-quoted", 'api_key: "{c}"'),
    ("YAML single-quoted", "api_key: '{c}'"),
    ("name/value entry", "{{name: JUDGE_TOKEN, value: {c}}}"),
    ("name=,value=", "name=HF_TOKEN,value={c}"),
    ("secrets mapping", "secrets: {{anything: {c}}}"),
    ("escaped quote inside", 'api_key="{c}\\"tail"'),
    ("quote inside bare value", 'api_key={c}"tail'),
    ("single-quoted assignment", "password='{c}'"),
    ("assignment then another", "token={c};other=1"),
    ("echoed by a server", "Incorrect API key provided: {c}"),
    ("token given", "the token given: {c}"),
    ("aws secret", "aws_secret_access_key={c}"),
    ("private key pair", "private_key: {c}"),
    ("ssh key variable", "SSH_PRIVATE_KEY={c}"),
    ("cookie pair", "cookie: {c}"),
    ("--hf-token V", "--hf-token {c}"),
    ("--db-password V", "--db-password {c}"),
    ("inside a command", "run JUDGE_TOKEN={c} --fast"),
    ("curl header", "curl -H 'Authorization: Bearer {c}' http://h"),
    ("mysql URL", "mysql://root:{c}@localhost/db"),
    ("redis URL no user", "redis://:{c}@host:6379"),
    ("git oauth2 URL", "git clone https://oauth2:{c}@gitlab.example/x"),
    ("apikey", "apikey={c}"),
    ("camelCase accessToken", "accessToken={c}"),
    ("JSON header", '{{"headers": {{"Authorization": "Bearer {c}"}}}}'),
    ("client_secret pair", "client_secret: {c}"),
    ("quoted assignment", 'OPENAI_API_KEY="{c}"'),
    ("x-api-key in flow", "{{headers: {{x-api-key: {c}}}}}"),
    # issue 33: a structured value under a credential-named key is the secret whole
    ("credentials structure override", "+judge.credentials={{user: bob, secret_value: {c}}}"),
    ("credentials nested structure", "+judge.credentials={{user: bob, vault: {{value: {c}}}}}"),
    ("secret list override", "+judge.api_key=[{c}, other]"),
]

# Forms whose secret is more than the needle: a quote is part of the value.
_WHOLE = {"escaped quote inside": '{c}"tail', "quote inside bare value": '{c}"tail'}


def _forms() -> list[Form]:
    forms = [
        Form(label, template.format(c=_canary(i)), _canary(i), _WHOLE.get(label, "").format(c=_canary(i)))
        for i, (label, template) in enumerate(_TEMPLATES)
    ]
    i = len(_TEMPLATES)
    forms.append(Form("Basic header", f"Authorization: Basic {_basic(_canary(i))}", _basic(_canary(i))))
    forms.append(Form("Basic in prose", f"send Basic {_basic(_canary(i + 1))} to it", _basic(_canary(i + 1))))
    return forms


FORMS: list[Form] = _forms()
