"""`probe`: a hostile Python map guest for the deny-by-default WASI sandbox.

Built with componentize-py, its component imports the rest of WASI 0.2 (filesystem,
sockets, environment), which the runtime links but grants nothing through. For each
input value it runs the probe the value names and emits `<probe>: <outcome>`, where the
outcome is `denied: <exception>` (`<exception>` = the exception's class, and for an
`OSError` its errno's name, `EAI_*` for a failed name lookup), `empty`, or `GOT ...` (a hole in the sandbox):

- `open <path>`: `open(path).read()`;
- `write <path>`: `open(path, "w").write(...)`;
- `listdir <path>`: `os.listdir(path)`;
- `environ`: `os.environ` (`empty` when it has nothing); `getenv <NAME>`: `os.getenv`;
- `connect <host:port>`: `socket.create_connection` (which resolves the host name
  first, even a numeric one); `socket <ip:port>`: a TCP `socket.socket().connect` to
  a numeric address (no name lookup); `sendto <ip:port>`: a UDP datagram;
- `urlopen <url>`: `urllib.request.urlopen(url).read()`;
- and the two capabilities a guest does get, through weir's own imports: `config <name>`
  answers the step's configuration value (`None` when unset), `log <message>` writes
  the message to the pipeline's log at level warn and answers `logged`;
- what reaches the pipeline's log without weir's import: `print <text>` prints the text
  to stdout and `eprint <text>` to stderr (answering `printed`), and `trap <text>`
  raises `ProbeTrap(text)`, a `BaseException` that the SDK does not turn into a
  rejection: the call fails, and its traceback goes to stderr.

Any other value passes through unchanged. Built by `make guests` ->
build/guests/probe_py.wasm; tests/tests/guests/python.rs asserts every line.

`socket`, `urllib.request` and the `idna` codec are imported at the top level, that is at build time
(componentize-py snapshots the initialised interpreter): a module first imported at
run time would be looked up in a filesystem the sandbox does not grant, and the probe
would only prove that the import fails, not that the connection is refused.
"""

import encodings.idna  # noqa: F401 (socket encodes host names with it, lazily)
import errno
import os
import socket
import sys
import urllib.request

import weir_guest


class ProbeTrap(BaseException):
    """Not an `Exception`: it escapes the SDK's per-record refusal and fails the call."""


def denied(error):
    """`denied: <class>[ <code>][ (<detail>)]` for what a probe raised."""
    name = type(error).__name__
    code = getattr(error, "errno", None)
    if isinstance(error, socket.gaierror):
        eai = [n for n in dir(socket) if n.startswith("EAI_") and getattr(socket, n) == code]
        name += " " + (eai[0] if eai else str(code))
    elif isinstance(error, OSError) and code in errno.errorcode:
        name += " " + errno.errorcode[code]
    if isinstance(error, (ImportError, LookupError)):
        name += f" ({error})"  # a module or codec left out of the build-time snapshot
    reason = getattr(error, "reason", None)  # urllib's URLError wraps the socket's error
    if isinstance(reason, BaseException):
        name += " (" + denied(reason)[len("denied: "):] + ")"
    return "denied: " + name


def run(verb, arg):
    if verb == "open":
        with open(arg) as f:
            return f"GOT DATA: {len(f.read())} chars"
    if verb == "write":
        with open(arg, "w") as f:
            f.write("written by a guest")
        return "GOT WRITE: the file was written"
    if verb == "listdir":
        return f"GOT DATA: {len(os.listdir(arg))} entries"
    if verb == "environ":
        names = sorted(os.environ)
        return "empty" if not names else "GOT DATA: " + " ".join(names)
    if verb == "getenv":
        value = os.getenv(arg)
        return "empty" if value is None else f"GOT DATA: {value}"
    if verb == "connect":
        host, _, port = arg.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            return f"GOT CONNECTION: {s.getpeername()}"
    if verb == "socket":
        host, _, port = arg.rpartition(":")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect((host, int(port)))
            return f"GOT CONNECTION: {s.getpeername()}"
    if verb == "sendto":
        host, _, port = arg.rpartition(":")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            sent = s.sendto(b"from a guest", (host, int(port)))
            return f"GOT SENT: {sent} bytes"
    if verb == "config":
        return str(weir_guest.config(arg))
    if verb == "log":
        weir_guest.log("warn", arg)
        return "logged"
    if verb == "print":
        print(arg)
        return "printed"
    if verb == "eprint":
        print(arg, file=sys.stderr)
        return "printed"
    if verb == "trap":
        raise ProbeTrap(arg)
    if verb == "urlopen":
        with urllib.request.urlopen(arg, timeout=5) as response:
            return f"GOT DATA: {len(response.read())} bytes"
    return None


@weir_guest.map
def probe(record):
    text = record.value.decode("utf-8", "replace")
    verb, _, arg = text.partition(" ")
    try:
        outcome = run(verb, arg)
    except Exception as e:  # every denial, whatever its class, is the answer
        outcome = denied(e)
    if outcome is None:
        return record
    record.value_str = f"{text}: {outcome}"
    return record
