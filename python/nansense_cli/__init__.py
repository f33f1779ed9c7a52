"""nansense-cli: a shell client for a running nansense session's MCP endpoint.

For coding agents (and people) without an MCP client: every tool the server
offers is a command, and its flags come from the tool's input schema in the
server's own tools/list, so the CLI knows exactly the tools and arguments of
the server it talks to and cannot drift from it::

    nansense-cli --port 8080 tools
    nansense-cli --port 8080 get_status
    nansense-cli --port 8080 get_layer_stats --layers conv1
    nansense-cli --port 8080 render_layer --layers features.0 --sample 3

A reply's JSON is printed as the server sent it; pictures are written as PNG
files (under --out-dir) and their paths printed. Exit status: 0 done, 1 the
server refused the call (its reason on stderr), 2 a usage error (unknown
command, bad flag), 3 no nansense server could be reached or it refused the
connection.

This package is a separate top-level package on purpose: it imports neither
torch nor nansense's native module (only the standard library), so it starts
in a fraction of a second.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import json
import os
import re
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, NoReturn, Optional, Sequence

__all__ = ["main", "McpClient", "CliError"]

PROTOCOL_VERSION = "2025-06-18"
DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"
# Seconds a call may take beyond the timeout_seconds a tool waits for.
HTTP_MARGIN_S = 30.0
HTTP_DEFAULT_S = 60.0

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

_GLOBAL_HELP = """\
usage: nansense-cli [--port PORT] [--host HOST] [--url URL] [--token TOKEN]
                    [--out-dir DIR] COMMAND [FLAGS...]

A shell client for a running nansense session's MCP endpoint (/mcp).

commands:
  tools                 list the server's tools (each one is a command)
  help TOOL             a tool's description and flags (same as TOOL --help)
  TOOL [FLAGS...]       call a tool; its flags are its arguments, from the
                        server's own schema (e.g. get_layer_stats --layers conv1)

options (before or after the command):
  --port PORT           the session's port (default {port}, or NANSENSE_PORT)
  --host HOST           the session's host (default {host})
  --url URL             the session's address instead of --host/--port, as its
                        banner prints it (http://host:port/, a ?token= kept);
                        or NANSENSE_URL
  --token TOKEN         the session's token, needed off loopback (or
                        NANSENSE_TOKEN)
  --out-dir DIR         where pictures are written (default {out})
  -h, --help            this help

Flags: strings, numbers and booleans as --name VALUE (a boolean as --name or
--no-name); a list as --name A B or --name A,B; an object as JSON text.
A dash may stand for an underscore (--include-histogram).

The reply's JSON is printed as the server sent it; each picture is written as
a PNG file and its path printed after its caption. Exit status: 0 done,
1 the server refused the call, 2 usage error, 3 no server reached.
"""


class CliError(Exception):
    """A failure with an exit status and a message for stderr."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def _default_out_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "nansense-cli")


# ---------------------------------------------------------------- the transport


class McpClient:
    """One MCP session over streamable HTTP: initialize, then requests with
    the Mcp-Session-Id the server issued, then DELETE to end it."""

    def __init__(self, endpoint: str, token: Optional[str] = None):
        self.endpoint = endpoint
        self.token = token
        self.session_id: Optional[str] = None
        self._next_id = 1

    def __enter__(self) -> "McpClient":
        result = self.request("initialize", {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "nansense-cli", "version": "1"},
        })
        if not isinstance(result, dict) or "protocolVersion" not in result:
            raise CliError(f"{self.endpoint} answered initialize with {result!r}: is this a nansense server?",
                           EXIT_UNREACHABLE)
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, HTTP_DEFAULT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.session_id is None:
            return
        try:
            self._send("DELETE", None, HTTP_DEFAULT_S)
        except CliError:
            pass  # the session expires on the server by itself

    def request(self, method: str, params: dict[str, Any], timeout: float = HTTP_DEFAULT_S) -> Any:
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        self._next_id += 1
        reply = self._post(message, timeout)
        if not isinstance(reply, dict):
            raise CliError(f"{self.endpoint} sent no JSON-RPC reply to {method}", EXIT_UNREACHABLE)
        if "error" in reply:
            error = reply["error"] or {}
            raise CliError(str(error.get("message", error)), EXIT_REFUSED)
        return reply.get("result")

    def _post(self, message: dict[str, Any], timeout: float) -> Any:
        return self._send("POST", json.dumps(message).encode(), timeout)

    def _send(self, method: str, body: Optional[bytes], timeout: float) -> Any:
        headers = {"Accept": "application/json, text/event-stream"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = PROTOCOL_VERSION
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        request = urllib.request.Request(self.endpoint, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                session_id = reply.headers.get("Mcp-Session-Id")
                if session_id:
                    self.session_id = session_id
                return _decode(reply.read(), reply.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as e:
            raise _http_error(self.endpoint, e) from None
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, ConnectionRefusedError):
                why = "connection refused"
            else:
                why = str(reason)
            raise CliError(f"no nansense server answers at {self.endpoint} ({why}). Is the training script "
                           "running and serving (nansense.start(..., port=...))? Pass its port with --port "
                           "or its address with --url.", EXIT_UNREACHABLE) from None
        except TimeoutError:
            raise CliError(f"{self.endpoint} did not answer within {timeout:g} s", EXIT_UNREACHABLE) from None
        except (ConnectionError, OSError) as e:
            raise CliError(f"the connection to {self.endpoint} failed: {e}", EXIT_UNREACHABLE) from None


def _decode(payload: bytes, content_type: str) -> Any:
    if not payload.strip():
        return None
    text = payload.decode("utf-8", errors="replace")
    if content_type.startswith("text/event-stream"):
        # One event carrying the whole reply: its data lines.
        data = [line[5:].lstrip() for line in text.splitlines() if line.startswith("data:")]
        text = "\n".join(data)
    try:
        return json.loads(text)
    except ValueError:
        raise CliError(f"the server sent something that is not JSON: {text[:200]!r}", EXIT_UNREACHABLE) from None


def _http_error(endpoint: str, e: urllib.error.HTTPError) -> CliError:
    body = e.read().decode("utf-8", errors="replace")
    message = ""
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            message = str(parsed["error"].get("message", ""))
    except ValueError:
        message = body.strip()[:300]
    if e.code in (401, 403):
        return CliError(f"the server at {endpoint} refused the connection ({e.code}): {message or e.reason}. "
                        "Off loopback a session needs its token: pass --token or --url with ?token= as the "
                        "session's banner prints it.", EXIT_UNREACHABLE)
    if e.code == 404 and not message.startswith("unknown"):
        return CliError(f"{endpoint} is not an MCP endpoint (404): is this a nansense session, served with "
                        "mcp=True?", EXIT_UNREACHABLE)
    return CliError(f"the server refused the request ({e.code}): {message or e.reason}", EXIT_REFUSED)


# ---------------------------------------------------------------- the address


def _endpoint(url: Optional[str], host: str, port: int) -> tuple[str, Optional[str]]:
    """The /mcp address and any token carried in url's query."""
    if not url:
        return f"http://{host}:{port}/mcp", None
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    tokens = urllib.parse.parse_qs(parts.query).get("token")
    token = tokens[0] if tokens else None
    path = parts.path.rstrip("/")
    if not path.endswith("/mcp"):
        path += "/mcp"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", "")), token


# ---------------------------------------------------------------- the tools' flags


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's exit status for usage errors and a pointer to
    the command's help."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message}\n(see `{self.prog} --help` for its flags)", EXIT_USAGE)


def _flag_names(name: str) -> list[str]:
    names = ["--" + name]
    if "_" in name:
        names.append("--" + name.replace("_", "-"))
    return names


def _item_type(schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if kind == "integer":
        return int
    if kind == "number":
        return float
    return str


def _json_object(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"key\": 1}'")
    return value


def _schema_help(prop: dict[str, Any], required: bool) -> str:
    text = str(prop.get("description", "")).replace("%", "%%")
    facts = []
    bounds = prop.get("items") if prop.get("type") == "array" else prop
    if isinstance(bounds, dict):
        for key, word in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                          ("exclusiveMaximum", "<")):
            if key in bounds:
                facts.append(f"{word} {bounds[key]}")
    if "default" in prop:
        facts.append(f"default {json.dumps(prop['default'])}")
    if required:
        facts.append("required")
    return text + (f" ({', '.join(facts)})" if facts else "")


def tool_parser(tool: dict[str, Any]) -> argparse.ArgumentParser:
    """The argparse parser of one tool, from its tools/list entry."""
    name = tool["name"]
    schema = tool.get("inputSchema") or {}
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    parser = _Parser(prog=f"nansense-cli {name}", description=tool.get("description"), allow_abbrev=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for arg, prop in properties.items():
        kind = prop.get("type")
        common: dict[str, Any] = {"dest": arg, "help": _schema_help(prop, arg in required),
                                  "required": arg in required}
        if kind == "boolean":
            parser.add_argument(*_flag_names(arg), action=argparse.BooleanOptionalAction, **common)
        elif kind == "array":
            items = prop.get("items") or {}
            metavar = str(items.get("type", "value")).upper()
            parser.add_argument(*_flag_names(arg), nargs="+", metavar=metavar, **common)
        elif kind == "object":
            parser.add_argument(*_flag_names(arg), type=_json_object, metavar="JSON", **common)
        else:
            choices = prop.get("enum")
            if choices:
                metavar = "{" + ",".join(map(str, choices)) + "}"
            else:
                metavar = kind.upper() if isinstance(kind, str) else "VALUE"
            parser.add_argument(*_flag_names(arg), type=_item_type(prop), choices=choices, metavar=metavar,
                                **common)
    return parser


def tool_arguments(tool: dict[str, Any], argv: Sequence[str]) -> dict[str, Any]:
    """A tool's arguments from its flags: only those given (the server
    applies its own defaults)."""
    parser = tool_parser(tool)
    parsed = vars(parser.parse_args(list(argv)))
    properties: dict[str, Any] = (tool.get("inputSchema") or {}).get("properties") or {}
    arguments: dict[str, Any] = {}
    for arg, value in parsed.items():
        if value is None:
            continue
        prop = properties.get(arg) or {}
        if prop.get("type") == "array":
            items = prop.get("items") or {}
            convert = _item_type(items)
            values = []
            for given in value:
                for part in str(given).split(","):
                    part = part.strip()
                    if not part:
                        continue
                    try:
                        values.append(convert(part))
                    except ValueError:
                        parser.error(f"argument {_flag_names(arg)[0]}: invalid {items.get('type')} value: "
                                     f"{part!r}")
            choices = items.get("enum")
            if choices:
                for v in values:
                    if v not in choices:
                        parser.error(f"argument {_flag_names(arg)[0]}: invalid choice: {v!r} (choose from "
                                     f"{', '.join(map(str, choices))})")
            value = values
        arguments[arg] = value
    return arguments


# ---------------------------------------------------------------- output


def print_result(tool: str, result: dict[str, Any], out_dir: str, out: Any = None) -> int:
    """Prints a tools/call result: text as sent, pictures as PNG files whose
    paths are printed. A refused call goes to stderr with status 1."""
    out = out or sys.stdout
    content = result.get("content") or []
    if result.get("isError"):
        reason = " ".join(str(c.get("text", "")) for c in content if c.get("type") == "text") or json.dumps(result)
        print(f"nansense-cli: {tool} was refused: {reason}", file=sys.stderr)
        return EXIT_REFUSED
    for i, item in enumerate(content):
        kind = item.get("type")
        if kind == "text":
            print(item.get("text", ""), file=out)
        elif kind == "image":
            print(_write_image(tool, i, item, out_dir), file=out)
        else:
            print(json.dumps(item), file=out)
    return EXIT_OK


def _write_image(tool: str, index: int, item: dict[str, Any], out_dir: str) -> str:
    mime = str(item.get("mimeType", "image/png"))
    suffix = "." + (mime.split("/", 1)[1] if "/" in mime else "png")
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=f"{tool}-{index}-", suffix=suffix, dir=out_dir)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(item.get("data", "")))
    except OSError as e:
        raise CliError(f"cannot write the picture into {out_dir}: {e}", EXIT_USAGE) from None
    return os.path.abspath(path)


def _first_sentence(text: str, limit: int = 100) -> str:
    """A description's first sentence ("e.g." and "i.e." do not end one),
    cut to about limit characters."""
    text = " ".join(text.split())
    match = re.search(r"(?<!e\.g)(?<!i\.e)\.(\s|$)", text)
    first = text[:match.start()] if match else text
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
    return first


def _print_tools(tools: list[dict[str, Any]]) -> None:
    width = max((len(t["name"]) for t in tools), default=0)
    for t in tools:
        print(f"{t['name']:<{width}}  {_first_sentence(str(t.get('description', '')))}")
    print(f"\n{len(tools)} tools. `nansense-cli help TOOL` (or TOOL --help) shows a tool's flags.")


# ---------------------------------------------------------------- main


def _global_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nansense-cli", add_help=False, allow_abbrev=False)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--url", default=None)
    parser.add_argument("--token", default=None)
    parser.add_argument("--out-dir", "--out_dir", dest="out_dir", default=None)
    return parser


def _timeout(tool: dict[str, Any], arguments: dict[str, Any]) -> float:
    """How long a call may take: the tool's own wait (timeout_seconds, as
    given or its default) plus a margin."""
    prop = ((tool.get("inputSchema") or {}).get("properties") or {}).get("timeout_seconds")
    if prop is None:
        return HTTP_DEFAULT_S
    wait = arguments.get("timeout_seconds", prop.get("default", prop.get("maximum", HTTP_DEFAULT_S)))
    try:
        return float(wait) + HTTP_MARGIN_S
    except (TypeError, ValueError):
        return HTTP_DEFAULT_S


def _find_tool(tools: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for t in tools:
        if t.get("name") == name:
            return t
    names = [t["name"] for t in tools]
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise CliError(f"nansense-cli: unknown command {name!r}{hint} `nansense-cli tools` lists the server's "
                   f"{len(names)} tools.", EXIT_USAGE)


def run(argv: Sequence[str]) -> int:
    options, rest = _global_parser().parse_known_args(list(argv))
    wants_help = any(a in ("-h", "--help") for a in rest)
    if not rest or (rest[0].startswith("-") and rest[0] != "--"):
        if wants_help or not rest:
            print(_GLOBAL_HELP.format(port=DEFAULT_PORT, host=DEFAULT_HOST, out=_default_out_dir()))
            return EXIT_OK if wants_help else EXIT_USAGE
        raise CliError(f"nansense-cli: unknown option {rest[0]!r}; the command comes first, its flags after it "
                       "(nansense-cli --help)", EXIT_USAGE)
    command, args = rest[0], rest[1:]

    port = options.port
    if port is None:
        env_port = os.environ.get("NANSENSE_PORT")
        try:
            port = int(env_port) if env_port else DEFAULT_PORT
        except ValueError:
            raise CliError(f"nansense-cli: NANSENSE_PORT must be a port number, got {env_port!r}", EXIT_USAGE) \
                from None
    url = options.url or (None if options.port is not None else os.environ.get("NANSENSE_URL"))
    endpoint, url_token = _endpoint(url, options.host, port)
    token = options.token or url_token or os.environ.get("NANSENSE_TOKEN")
    out_dir = options.out_dir or _default_out_dir()

    with McpClient(endpoint, token) as client:
        tools = (client.request("tools/list", {}) or {}).get("tools") or []
        if command == "tools":
            if args:
                raise CliError(f"nansense-cli tools takes no arguments, got {' '.join(args)}", EXIT_USAGE)
            _print_tools(tools)
            return EXIT_OK
        if command == "help":
            if len(args) != 1:
                raise CliError("usage: nansense-cli help TOOL (`nansense-cli tools` lists them)", EXIT_USAGE)
            tool_parser(_find_tool(tools, args[0])).print_help()
            return EXIT_OK
        tool = _find_tool(tools, command)
        if wants_help:
            tool_parser(tool).print_help()
            return EXIT_OK
        arguments = tool_arguments(tool, args)
        result = client.request("tools/call", {"name": command, "arguments": arguments},
                                timeout=_timeout(tool, arguments))
        return print_result(command, result or {}, out_dir)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The console script nansense-cli."""
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except CliError as e:
        message = str(e)
        print(message if message.startswith("nansense-cli") else f"nansense-cli: {message}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
