"""HTTPS calls to a test daemon (its self-signed certificate accepted) for
the Python parts of the integration tests; server-lib.sh puts this folder
on PYTHONPATH."""
import json
import ssl
import urllib.request

_CTX = ssl.create_default_context()
_CTX.check_hostname = False
_CTX.verify_mode = ssl.CERT_NONE


def call_raw(base, key, method, path, body=None, raw=None, timeout=60):
    """(status, body bytes); body is sent as JSON, raw as given."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + key)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, context=_CTX, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def call(base, key, method, path, body=None, timeout=60):
    """(status, parsed JSON body; {} when empty)."""
    st, out = call_raw(base, key, method, path, body, timeout=timeout)
    return st, json.loads(out or b"{}")


def open_stream(base, key, path, body, timeout=60):
    """The response of a POST (for reading an SSE stream)."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    return urllib.request.urlopen(req, context=_CTX, timeout=timeout)
