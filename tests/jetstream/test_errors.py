"""JetStream API errors: values as nats-server's errors.json has them, and the generator, which
writes jetstream/errors.py (the error type, written by hand, is in jetstream/api_error.py)."""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from infinistream.jetstream import errors

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "scripts" / "gen_js_errors.py"
GENERATED = REPO / "src" / "infinistream" / "jetstream" / "errors.py"
# (factory, args, code, err_code, description): copied from nats-server's server/errors.json.
KNOWN = [
    (errors.stream_not_found, (), 404, 10059, "stream not found"),
    (errors.consumer_not_found, (), 404, 10014, "consumer not found"),
    (errors.bad_request, (), 400, 10003, "bad request"),
    (
        errors.stream_name_exist,
        (),
        400,
        10058,
        "stream name already in use with a different configuration",
    ),
    (errors.stream_wrong_last_sequence, (42,), 400, 10071, "wrong last sequence: 42"),
    (errors.stream_wrong_last_msg_id, ("abc",), 400, 10070, "wrong last msg ID: abc"),
    (errors.stream_invalid_config, ("invalid subject",), 500, 10052, "invalid subject"),
    (errors.not_enabled, (), 503, 10076, "JetStream not enabled"),
    (errors.not_enabled_for_account, (), 503, 10039, "JetStream not enabled for account"),
    (errors.no_message_found, (), 404, 10037, "no message found"),
    (errors.stream_message_exceeds_maximum, (), 400, 10054, "message size exceeds maximum allowed"),
    (errors.stream_subject_overlap, (), 400, 10065, "subjects overlap with an existing stream"),
    (errors.stream_mismatch, (), 400, 10056, "stream name in subject does not match request"),
    (errors.consumer_name_exist, (), 400, 10013, "consumer name already in use"),
    (errors.invalid_json, ("unexpected end",), 400, 10025, "invalid JSON: unexpected end"),
    (errors.sequence_not_found, (7,), 400, 10043, "sequence 7 not found"),
    (errors.replicas_count_cannot_be_negative, (), 400, 10133, "replicas count cannot be negative"),
    (
        errors.stream_duplicate_message_conflict,
        (),
        409,
        10158,
        "duplicate message id is in process",
    ),
    (
        errors.consumer_name_too_long,
        (255,),
        400,
        10102,
        "consumer name is too long, maximum allowed is 255",
    ),
]


@pytest.mark.parametrize(("factory", "args", "code", "err_code", "description"), KNOWN)
def test_known_errors(
    factory: object, args: tuple[object, ...], code: int, err_code: int, description: str
) -> None:
    assert callable(factory)
    err = factory(*args)
    assert isinstance(err, errors.ApiError)
    assert (err.code, err.err_code, err.description) == (code, err_code, description)
    assert err.to_dict() == {"code": code, "err_code": err_code, "description": description}


def test_constants() -> None:
    assert errors.JS_STREAM_NOT_FOUND == 10059
    assert errors.JS_CONSUMER_NOT_FOUND == 10014
    assert errors.JS_BAD_REQUEST == 10003
    assert errors.JS_STREAM_NAME_EXIST == 10058
    assert errors.JS_STREAM_WRONG_LAST_SEQUENCE == 10071
    assert errors.ERR_CODES["JSStreamNotFoundErr"] == 10059
    assert (
        errors.ERRORS["JSStreamWrongLastSequenceErrF"].description == "wrong last sequence: {seq}"
    )


def test_api_error_behaviour() -> None:
    err = errors.stream_not_found()
    # Same text as nats-server's ApiError.Error().
    assert str(err) == "stream not found (10059)"
    assert errors.ApiError.from_dict(err.to_dict()).to_dict() == err.to_dict()
    assert errors.is_api_error(err, errors.JS_STREAM_NOT_FOUND, errors.JS_BAD_REQUEST)
    assert not errors.is_api_error(err, errors.JS_BAD_REQUEST)
    assert not errors.is_api_error(ValueError("x"), errors.JS_STREAM_NOT_FOUND)
    assert not errors.is_api_error(None, errors.JS_STREAM_NOT_FOUND)
    # A new exception per call; exceptions carry tracebacks and must not be shared.
    assert errors.stream_not_found() is not errors.stream_not_found()
    with pytest.raises(errors.ApiError):
        raise err


def test_placeholders() -> None:
    err = errors.stream_external_del_prefix_overlaps(prefix="p.>", subject="s")
    assert err.description == "stream external delivery prefix p.> overlaps with stream subject s"
    # Parameter order follows nats-server's factory (tags sorted): err before subject.
    err = errors.restore_subscribe_failed(ValueError("boom"), "x.y")
    assert err.description == "JetStream unable to subscribe to restore snapshot x.y: boom"
    # One-pass substitution like strings.NewReplacer: substituted text is not re-expanded.
    err = errors.stream_external_del_prefix_overlaps("{subject}", "s")
    assert (
        err.description
        == "stream external delivery prefix {subject} overlaps with stream subject s"
    )
    # An exception is rendered by its message (Go: err.Error()).
    assert errors.stream_create(RuntimeError("disk full")).description == "disk full"


def test_unless_passes_api_errors_through() -> None:
    original = errors.stream_not_found()
    assert errors.stream_create(original, unless=original) is original
    other = errors.stream_create("plain", unless=ValueError("plain"))
    assert other.err_code == errors.ERR_CODES["JSStreamCreateErrF"]


def test_every_error_has_a_factory_and_constant() -> None:
    tag_re = re.compile(r"\{(.+?)\}")
    for spec in errors.ERRORS.values():
        name = re.sub(r"(ErrorF|ErrF|Err|F)$", "", spec.constant.removeprefix("JS"))
        snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
        factory = getattr(errors, snake)
        assert getattr(errors, "JS_" + snake.upper()) == spec.err_code
        tags = sorted(set(tag_re.findall(spec.description)))
        params = [p for p in inspect.signature(factory).parameters if p != "unless"]
        assert params == tags, spec.constant
        err = factory(*[f"<{t}>" for t in tags])
        assert (err.code, err.err_code) == (spec.code, spec.err_code)
        assert err.description == tag_re.sub(lambda m: f"<{m[1]}>", spec.description)
    assert len(set(errors.ERR_CODES.values())) == len(errors.ERRORS)


def _load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("generated_errors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generator(tmp_path: Path) -> None:
    source = [
        {
            "constant": "JSThingNotFoundErr",
            "code": 404,
            "error_code": 10001,
            "description": "thing not found",
        },
        {
            "constant": "JSThingBadErrF",
            "code": 400,
            "error_code": 10002,
            "description": "thing {name} is bad: {err}",
        },
        {
            "constant": "JSPlainGeneralErrorF",
            "code": 500,
            "error_code": 10003,
            "description": "{err}",
        },
    ]
    src = tmp_path / "errors.json"
    src.write_text(json.dumps(source))
    out = tmp_path / "gen.py"
    subprocess.run([sys.executable, str(GENERATOR), str(src), str(out)], check=True)
    mod = _load_module(out)
    assert mod.thing_not_found().to_dict() == {
        "code": 404,
        "err_code": 10001,
        "description": "thing not found",
    }
    assert mod.thing_bad("oops", "x").description == "thing x is bad: oops"
    assert mod.plain_general("e").description == "e"
    assert mod.JS_THING_BAD == 10002


def test_errors_module_is_what_the_generator_writes(tmp_path: Path) -> None:
    # The module's table is errors.json's entries: given back to the generator, it writes the
    # module again to the byte, so nothing in it was edited by hand.
    source = [
        {
            "constant": spec.constant,
            "code": spec.code,
            "error_code": spec.err_code,
            "description": spec.description,
        }
        for spec in errors.ERRORS.values()
    ]
    src = tmp_path / "errors.json"
    src.write_text(json.dumps(source))
    out = tmp_path / "errors.py"
    subprocess.run([sys.executable, str(GENERATOR), str(src), str(out)], check=True)
    assert out.read_text() == GENERATED.read_text()


# nats-server's server/errors.json (Apache-2.0), as of its commit 452802b08f41 (2026-08-20):
# the table generated into jetstream/errors.py must hold every entry of it.
NATS_ERRORS_JSON = Path(__file__).parent / "data" / "nats-server-errors.json"


def test_matches_nats_server_errors_json() -> None:
    """Every entry of the real errors.json."""
    source = json.loads(NATS_ERRORS_JSON.read_text())
    for item in source:
        spec = errors.ERRORS[str(item["constant"])]
        assert (spec.code, spec.err_code, spec.description) == (
            item["code"],
            item["error_code"],
            item["description"],
        )
    assert len(errors.ERRORS) == len(source)
