"""Credentials out of every text the project shows. Stdlib only.

One rule, applied where text leaves a process (errors, log lines, summary.json,
metrics.jsonl, the report, a launcher's displayed commands), never where a path is
used: the real URL still reaches the filesystem.

In a URL (`scheme://...`):
  - the userinfo goes: `s3://KEY:SECRET@bucket/x` and `s3://KEY@bucket/x` read
    `s3://***@bucket/x`; the scheme, host and path stay, so the line still says where.
    The userinfo ends at the last `@` of the authority (up to the first `/`), so a raw
    `@` in a password goes with it. A password holding a raw `/` (AWS secret keys do)
    cuts the authority short: when what is left looks like `user:secret` (a `:` not
    followed by a port number) and an `@` comes later in the same token, the userinfo
    runs up to that `@`.
  - the values of query parameters that carry secrets (presigned and SAS URLs, API
    keys: SECRET_QUERY_KEYS, any case) read `***`; the parameter names stay.
Left alone on purpose: text without `://` (an scp-style `user@host:path` names a user,
not a secret, and an e-mail address is no credential), a port (`hdfs://nn:8020/x`), an
`@` in a path (`gs://bucket/model@v2`). A password holding both `@` and `/` unencoded
is not a URL any parser agrees on; percent-encode it.
"""
import re

MASK = "***"
# Query parameters whose value is a secret (compared in lower case).
SECRET_QUERY_KEYS = frozenset({
    "x-amz-signature", "x-amz-credential", "x-amz-security-token",  # S3 presigned
    "x-goog-signature", "x-goog-credential",  # GCS signed URLs (V4)
    "signature", "sig",  # S3 V2 presigned, Azure SAS
    "awsaccesskeyid", "access_key", "accesskey", "access_key_id", "secret", "secret_key",
    "secretkey", "client_secret", "password", "passwd", "pwd",
    "token", "access_token", "auth", "api_key", "apikey", "key", "sessiontoken",
})

# `scheme://` then the token's rest up to whitespace or a quote: repr() and JSON quote a
# path, and a shell line separates words with spaces.
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^\s'\"`<>]*)")
# A host, with a port if any: `nn`, `nn:8020`, `[::1]:8080` (nothing that reads user:secret).
_HOST_PORT = re.compile(r"^(?:\[[^\]]*\]|[^:\[]*)(?::\d+)?$")
_QUERY = re.compile(r"([?&;])([^=&#;\s'\"]+)=([^&#;\s'\"]*)")


def redact(text):
    """`text` with every URL's userinfo and secret query values masked (the module's
    doc says the rule); anything that is not a str is returned as given."""
    if not isinstance(text, str) or "://" not in text:
        return text
    return _URL.sub(_redact_url, text)


def redact_tree(value):
    """A JSON-like value (dicts, lists, tuples, strings) with every string redacted:
    what summary.json and metrics.jsonl records hold."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(key): redact_tree(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_tree(item) for item in value)
    return value


def redact_argv(argv):
    """A command's argv for DISPLAY (the real one is what runs)."""
    return [redact(arg) for arg in argv]


def _redact_url(found: re.Match) -> str:
    scheme, rest = found.group(1), found.group(2)
    end = _userinfo_end(rest)
    if end is not None:
        rest = MASK + rest[end:]
    return scheme + _QUERY.sub(_redact_query, rest)


def _userinfo_end(rest: str) -> int | None:
    """The index of the `@` that ends the userinfo of `rest` (the URL after `://`)."""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        return authority.rindex("@")
    cut_short = len(authority) < len(rest)
    if cut_short and not _HOST_PORT.match(authority) and "@" in rest:
        return rest.index("@")
    return None


def _redact_query(found: re.Match) -> str:
    separator, name, value = found.groups()
    if name.lower() in SECRET_QUERY_KEYS and value:
        value = MASK
    return f"{separator}{name}={value}"
