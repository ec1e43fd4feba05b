"""`export --push-to-hub`: a repository id the Hub would refuse is refused before anything is written, and a failed
upload says what failed in the words of its cause (no network, offline mode, the login, the namespace) and how to push
the export it kept, without the advice to run a command that would be refused."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import huggingface_hub
import pytest
from cli_runs import run_cli
from huggingface_hub import constants
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts.engine.evaluation.export import hub_command, login_command

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path, _ = write_checkpoint(tmp_path_factory.mktemp("hub") / "ckpt.pt", "convnext_atto")
    return path


@pytest.fixture
def hub_answering(monkeypatch):
    """Points huggingface_hub at a local server that answers every request with the status given."""
    servers = []

    def start(status: int) -> None:
        class Refuse(BaseHTTPRequestHandler):
            def answer(self):
                body = json.dumps({"error": f"status {status}"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = answer

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")

    yield start
    for server in servers:
        server.shutdown()


def push(checkpoint, out, *extra) -> str:
    """The one error line of an export pushed to someone/x."""
    result, error = run_cli(["export", "--checkpoint", checkpoint, "--out", out, "--push-to-hub", "someone/x", *extra])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    return error


def test_a_repository_id_the_hub_refuses_is_refused_before_anything_is_written(checkpoint, tmp_path):
    for repo in ("some one/x", "a/b/c", "someone/x.git"):
        result, error = run_cli(
            ["export", "--checkpoint", checkpoint, "--out", tmp_path / "out", "--push-to-hub", repo]
        )
        assert result.exit_code == 2 and "--push-to-hub" in error and repr(repo) in error, result.output
        assert not (tmp_path / "out").exists()


def test_an_unreachable_hub_is_named_and_the_kept_folder_can_be_pushed_as_advised(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:1")  # nothing listens there: a refused connection
    out = tmp_path / "local"
    error = push(checkpoint, out, "--private")
    assert "could not be reached" in error and "login" not in error, error
    assert f"`{hub_command()} upload someone/x {out} --private`" in error and "--force" in error
    assert "run the export again" not in error  # that is refused: the folder exists now
    # the two ways it gives: the folder as it is holds what the Hub needs, and --force exports again
    assert {"model.safetensors", "config.json"} <= {p.name for p in out.iterdir()}
    uploaded = []
    monkeypatch.setattr(
        huggingface_hub.HfApi,
        "create_repo",
        lambda self, repo_id, **kw: huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}"),
    )
    monkeypatch.setattr(huggingface_hub.HfApi, "file_exists", lambda self, **kwargs: False)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", lambda self, **kw: uploaded.append(kw) or "pushed")
    result, _ = run_cli(["export", "--checkpoint", checkpoint, "--out", out, "--push-to-hub", "someone/x", "--force"])
    assert result.exit_code == 0 and uploaded and "pushed to pushed" in result.output, result.output


def test_offline_mode_is_named(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    error = push(checkpoint, tmp_path / "local")
    assert "HF_HUB_OFFLINE is set" in error and "login" not in error, error


@pytest.mark.parametrize(
    "status, advice",
    [(401, f"did not accept the login: log in with {login_command()} or set HF_TOKEN"), (403, "under someone")],
)
def test_a_refused_login_or_namespace_is_named(checkpoint, tmp_path, hub_answering, status, advice):
    hub_answering(status)
    error = push(checkpoint, tmp_path / "local")
    assert advice in error and str(status) in error, error
    assert "could not be reached" not in error
