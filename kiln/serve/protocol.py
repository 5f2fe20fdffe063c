"""The KServe v2 inference protocol as Triton speaks it over HTTP: an inference request (a JSON
header, then binary tensor data when `Inference-Header-Content-Length` says where the JSON ends)
becomes feeds checked against the model; outputs become the JSON (and binary) response. Metadata
documents (server, model, config) are built here too, so that app.py only routes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.errors import InputError, ServeError
from kiln.ir.input_check import check_input
from kiln.serve import tensor_codec
from kiln.serve.dispatch import ModelConfig, Priority
from kiln.version import __version__

if TYPE_CHECKING:
    from kiln.runtime.model import Model

SERVER_NAME = "kiln"
EXTENSIONS = ["binary_tensor_data", "model_repository"]


@dataclass(frozen=True)
class ModelSpec:
    """What decoding a request needs of a model, read once when it is loaded (Model.inputs and
    Model.outputs build new lists on every call, which a request should not pay for)."""

    types: dict[str, Any]  # input name -> its IR type (kiln.ir.input_check checks feeds against it)
    datatypes: dict[str, str]  # input name -> KServe datatype
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, model: Model) -> ModelSpec:
        return cls({p.name: p.type for p in model.mod.input_vars},
                   {i.name: tensor_codec.kserve_type(i.dtype) for i in model.inputs},
                   tuple(o.name for o in model.outputs))


@dataclass
class ParsedInfer:
    """A decoded inference request: feeds checked against the model; outputs to return, in order."""

    feeds: dict[str, np.ndarray]
    outputs: list[str]
    binary: set[str]  # outputs returned as binary data
    priority: Priority | None
    timeout_s: float | None
    request_id: str | None


def read_json(body: bytes | memoryview, what: str = "request body") -> Any:
    try:
        return json.loads(bytes(body))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ServeError(f"{what} is not valid JSON: {e}") from None


def parse_infer(body: bytes, header_length: str | None, spec: ModelSpec, name: str) -> ParsedInfer:
    """The request `body` holds, for model `name`; a ServeError (400) naming what is wrong otherwise."""
    view = memoryview(body)
    split = _header_length(header_length, len(body))
    doc = read_json(view[:split] if split is not None else view)
    if not isinstance(doc, dict):
        raise ServeError("request body must be a JSON object with 'inputs'")
    blob = view[split:] if split is not None else view[:0]
    feeds = _feeds(doc.get("inputs"), blob, spec, name)
    params = _object(doc.get("parameters", {}), "request 'parameters'")
    outputs, binary = _outputs(doc.get("outputs"), spec, name, params.get("binary_data_output", False))
    request_id = doc.get("id")
    return ParsedInfer(feeds, outputs, binary, parse_priority(params.get("priority")),
                       parse_timeout(params.get("timeout")), request_id if isinstance(request_id, str) else None)


def _header_length(text: str | None, size: int) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or int(text) > size:
        raise ServeError(f"Inference-Header-Content-Length is {text!r}; it must be a byte count within the "
                         f"body's {size} bytes")
    return int(text)


def _object(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ServeError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _feeds(inputs: Any, blob: memoryview, spec: ModelSpec, name: str) -> dict[str, np.ndarray]:
    if not isinstance(inputs, list):
        raise ServeError("request 'inputs' must be a list of tensors")
    params = spec.types
    feeds: dict[str, np.ndarray] = {}
    at = 0
    for tensor in inputs:
        tensor = _object(tensor, "each of 'inputs'")
        key = tensor.get("name")
        if key not in params:
            raise ServeError(f"model '{name}' has no input {key!r}; its inputs are {', '.join(params)}")
        if key in feeds:
            raise ServeError(f"input '{key}' is given twice")
        feeds[key], at = _tensor(tensor, f"input '{key}'", blob, at, spec.datatypes[key])
    if at != len(blob):
        raise ServeError(f"{len(blob) - at} bytes of binary data after the last binary input")
    missing = [p for p in params if p not in feeds]
    if missing:
        raise ServeError(f"model '{name}' needs input(s) {', '.join(missing)}")
    dims: dict[str, int] = {}
    try:
        return {k: check_input(k, feeds[k], params[k], dims) for k in params}
    except InputError as e:
        raise ServeError(str(e)) from None


def _tensor(tensor: dict, what: str, blob: memoryview, at: int, want: str) -> tuple[np.ndarray, int]:
    """(the tensor, where the next binary input starts); `want`: the KServe datatype the model takes."""
    datatype, shape = tensor.get("datatype"), tensor.get("shape")
    if datatype != want:
        raise ServeError(f"{what} has datatype {datatype!r}; the model takes {want}")
    size = _object(tensor.get("parameters", {}), f"{what} 'parameters'").get("binary_data_size")
    if size is None:
        if "data" not in tensor:
            raise ServeError(f"{what} has neither 'data' nor a binary_data_size parameter")
        return tensor_codec.from_json(what, datatype, shape, tensor["data"]), at
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ServeError(f"{what}: binary_data_size must be a non-negative integer, got {size!r}")
    if at + size > len(blob):
        raise ServeError(f"{what}: binary data is truncated: it needs {size} bytes at offset {at}, the body has "
                         f"{len(blob) - at} left")
    return tensor_codec.from_binary(what, datatype, shape, blob[at:at + size]), at + size


def _outputs(requested: Any, spec: ModelSpec, name: str, binary_default: Any) -> tuple[list[str], set[str]]:
    names = spec.outputs
    if requested is None:
        return list(names), set(names) if binary_default is True else set()
    if not isinstance(requested, list):
        raise ServeError("request 'outputs' must be a list")
    chosen, binary = [], set()
    for out in requested:
        key = _object(out, "each of 'outputs'").get("name")
        if key not in names:
            raise ServeError(f"model '{name}' has no output {key!r}; its outputs are {', '.join(names)}")
        chosen.append(key)
        if _object(out.get("parameters", {}), f"output '{key}' 'parameters'").get("binary_data",
                                                                                  binary_default) is True:
            binary.add(key)
    return chosen, binary


def parse_priority(value: Any) -> Priority | None:
    """Kiln's "rt"/"be", or Triton's integer priority: 0 the model's, 1 real-time, larger best-effort."""
    if value is None or value == 0:
        return None
    if value in ("rt", "be"):
        return Priority(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return Priority.RT if value == 1 else Priority.BE
    raise ServeError(f'parameter priority is {value!r}; it must be "rt", "be" or a non-negative integer '
                     "(1 real-time, larger best-effort, 0 the model's own)")


def parse_timeout(value: Any) -> float | None:
    """Triton's timeout: microseconds; 0 or absent, the model's own."""
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ServeError(f"parameter timeout is {value!r}; it must be a non-negative integer of microseconds")
    return value / 1e6


def encode_infer(name: str, version: str, parsed: ParsedInfer, results: dict[str, np.ndarray]
                 ) -> tuple[bytes, int | None]:
    """(response body, length of its JSON header when binary data follows it, else None)."""
    docs, blobs = [], []
    for key in parsed.outputs:
        arr = np.asarray(results[key])
        doc = {"name": key, "datatype": tensor_codec.datatype_of(arr), "shape": list(arr.shape)}
        if key in parsed.binary:
            blobs.append(tensor_codec.to_binary(arr))
            doc["parameters"] = {"binary_data_size": len(blobs[-1])}
        else:
            doc["data"] = tensor_codec.to_json(arr)
        docs.append(doc)
    head = {"model_name": name, "model_version": version, "outputs": docs}
    if parsed.request_id is not None:
        head["id"] = parsed.request_id
    text = json.dumps(head, separators=(",", ":")).encode()
    if not blobs:
        return text, None
    return b"".join([text, *blobs]), len(text)


def server_metadata() -> dict:
    return {"name": SERVER_NAME, "version": __version__, "extensions": EXTENSIONS}


def _tensor_meta(info: Any) -> dict:
    shape = [-1] if info.shape is None else [d if isinstance(d, int) else -1 for d in info.shape]
    return {"name": info.name, "datatype": tensor_codec.kserve_type(info.dtype), "shape": shape}


def model_metadata(name: str, version: str, model: Model) -> dict:
    return {"name": name, "versions": [version], "platform": "kiln",
            "inputs": [_tensor_meta(i) for i in model.inputs], "outputs": [_tensor_meta(o) for o in model.outputs]}


def model_config(name: str, model: Model, config: ModelConfig) -> dict:
    """Triton's model configuration document, with Kiln's own settings under "kiln"."""
    def tensors(infos: list) -> list[dict]:
        return [{"name": t["name"], "data_type": "TYPE_" + ("STRING" if t["datatype"] == "BYTES" else t["datatype"]),
                 "dims": t["shape"]} for t in map(_tensor_meta, infos)]
    settings = {"priority": config.priority.value, "cores": config.cores, "max_batch": config.max_batch,
                "batch_delay_us": config.batch_delay_us, "queue_limit": config.queue_limit,
                "timeout_s": config.timeout_s, "replicas": config.replicas}
    return {"name": name, "platform": "kiln", "max_batch_size": config.max_batch, "input": tensors(model.inputs),
            "output": tensors(model.outputs), "kiln": settings}
