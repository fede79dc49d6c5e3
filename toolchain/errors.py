"""Every exception the toolchain raises on purpose, in one hierarchy.

Each error carries ``hint``: the next thing the user should do. The CLI renders
``Error: <message> — <hint>`` and exits with ``exit_code``; it never shows a traceback
for these (``TOOLCHAIN_DEBUG=1`` does).

Exit codes split what a retry cannot fix from what it may: 2 the user's input (a bad spec, flag, key file,
URL, credentials), 3 a missing extra, 4 no GPU/TensorRT-LLM, 5 the accuracy gate, 6 an untrusted signature,
and :data:`EX_TEMPFAIL` (75, sysexits.h) for a :class:`TransientError`: a service that could not be reached,
timed out, or answered 429/5xx after the retries (the registry, the Hugging Face Hub, an HTTP endpoint). A
cluster Job retries exit 75 and fails an index at once on 2/3/4 (``toolchain.pipeline.kube_jobs``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

EX_TEMPFAIL = 75  # sysexits.h: "temporary failure, indicating something that is not really an error"


class ToolchainError(Exception):
    """Base of every expected failure."""

    exit_code = 1
    default_hint = ""
    transient = False  # whether trying again later may succeed (TransientError)

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint

    def __str__(self) -> str:
        return self.message


class TransientError(ToolchainError):
    """A failure that may pass on its own: a service unreachable, timed out, or answering 429/5xx after the
    retries. Exit code 75 (EX_TEMPFAIL), which schedulers retry; a subclass that is also a UserInputError is
    not transient (it sets both back)."""

    exit_code = EX_TEMPFAIL
    transient = True


class UserInputError(ToolchainError):
    """A mistake in what the user gave us (flags, files, specs). Exit code 2."""

    exit_code = 2


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong in a spec: where (YAML path, line) and what; an unknown key names itself and its likely
    intended name."""

    message: str
    yaml_path: str | None = None
    line: int | None = None
    key: str | None = None  # an unknown key, as written
    did_you_mean: str | None = None  # the allowed key closest to it

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class SpecError(UserInputError):
    """An engine spec that does not parse or validate. ``problems`` lists every problem found (the message
    leads with the first and names the others)."""

    default_hint = "fix the spec, then run `toolchain spec validate SPEC`"

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        yaml_path: str | None = None,
        line: int | None = None,
        hint: str | None = None,
        problems: tuple[SpecProblem, ...] = (),
    ) -> None:
        where = []
        if file is not None:
            where.append(f"{file}" + (f":{line}" if line is not None else ""))
        if yaml_path:
            where.append(yaml_path)
        prefix = " ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message, hint)
        self.file = str(file) if file is not None else None
        self.yaml_path = yaml_path
        self.line = line
        self.problems = problems or (SpecProblem(message, yaml_path, line),)


class CompatibilityError(UserInputError):
    """A combination TensorRT-LLM rejects (or silently degrades) on the target GPU."""

    default_hint = "change the spec as the message says, then `toolchain spec validate SPEC`"


class UnknownGPUError(UserInputError):
    default_hint = "run `toolchain gpus` to list catalog names"


class ModelConfigError(UserInputError):
    """A Hugging Face config.json that is missing, malformed or has unknown fields."""

    default_hint = "point the spec at a Hugging Face checkpoint directory that holds config.json"


class PlanError(UserInputError):
    """A plan that cannot be met (cell does not fit, SLO below the hardware floor...)."""

    default_hint = "adjust the spec (GPU, TP, max_seq_len, SLO or traffic) and re-run `toolchain plan`"


class MissingDependencyError(ToolchainError):
    """An optional dependency (an extra) is not installed."""

    exit_code = 3

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"this command needs the Python package '{module}', which is not installed",
            f"pip install 'toolchain[{extra}]' (or run scripts/setup.sh)",
        )
        self.module = module
        self.extra = extra


class NeedsGPUError(ToolchainError):
    """The step needs an NVIDIA GPU and/or TensorRT-LLM, and this machine has neither."""

    exit_code = 4


# --- quantization -----------------------------------------------------------------------------


class QuantizeError(ToolchainError):
    default_hint = "see the message; re-run with TOOLCHAIN_DEBUG=1 for ModelOpt's traceback"


class CheckpointError(UserInputError):
    default_hint = "give a Hugging Face checkpoint directory (config.json + *.safetensors)"


class HubUnavailableError(TransientError):
    """The Hugging Face Hub could not be reached, timed out, or answered 429/5xx. Exit code 75."""

    default_hint = (
        "check the network (HF_ENDPOINT, a proxy), then try again; or download the model and point the spec at it"
    )


class OutputExistsError(UserInputError):
    default_hint = "choose another --out, or pass --force to replace it"


class AccuracyGateError(ToolchainError):
    exit_code = 5
    default_hint = (
        "try a gentler format (fp8, int8_sq), more calibration samples, or relax the spec's accuracy thresholds"
    )


# --- HTTP (toolchain/http.py: services with no error family of their own) ------------------------


class HTTPError(ToolchainError):
    """An HTTP answer that is not what was asked for."""

    default_hint = "re-run with TOOLCHAIN_DEBUG=1 to see each request and its answer"


class HTTPAuthError(HTTPError, UserInputError):
    """401/403: the credentials (or the access they grant) are the user's to fix. Exit code 2."""

    exit_code = 2


class HTTPNotFoundError(HTTPError, UserInputError):
    """404: a URL that names nothing. Exit code 2."""

    exit_code = 2


class HTTPUnavailableError(HTTPError, TransientError):
    """No answer (refused, timed out) or 429/5xx after the retries. Exit code 75."""


# --- registry ---------------------------------------------------------------------------------


class RegistryError(ToolchainError):
    default_hint = "check --registry (or TOOLCHAIN_REGISTRY) and run `toolchain cache verify`"


class RegistryURLError(RegistryError, UserInputError):
    exit_code = 2
    default_hint = "use a local path, s3://bucket/prefix, hf://org/repo or oci://host/repository"


class ArtifactNotFoundError(FileNotFoundError, RegistryError):
    """A key, tag or digest the registry does not hold. On the command line it is the reference the user gave,
    so it exits 2 like every user mistake; code that asks whether an entry exists catches it."""

    exit_code = 2

    def __init__(self, key: str, registry: str) -> None:
        import shlex

        RegistryError.__init__(
            self,
            f"no entry {key} in registry {registry}",
            f"run `toolchain cache ls --registry {shlex.quote(registry)}` to see what it holds, or build it with "
            "`toolchain build`",
        )
        self.key = key
        self.registry = registry


class CorruptArtifactError(RegistryError):
    default_hint = "run `toolchain cache verify --repair` to remove the corrupt entry, then rebuild or re-push it"


class ManifestError(RegistryError):
    default_hint = "the manifest is refused; re-push the entry from a trusted build"


class RegistryUnavailableError(RegistryError, TransientError):
    """The registry could not be reached, timed out, or answered 429/5xx after the retries. Exit code 75."""

    default_hint = "check the endpoint URL and the network, then try again"


class RegistryPlainHTTPError(RegistryUnavailableError, UserInputError):
    """HTTPS to a registry that speaks plain HTTP: a setting the user must choose (exit 2)."""

    exit_code = 2
    transient = False


class RegistryAuthError(RegistryError, UserInputError):
    """A registry refused the credentials given (401) or the access asked (403): the user's to fix. Exit code 2."""

    exit_code = 2


class SignatureError(RegistryError):
    """An entry whose signature is required but missing, made with another key, or of another digest
    (docs/signing.md). Exit code 6: the entry is not trusted, whatever else is right with it."""

    exit_code = 6
    default_hint = "do not use this entry; push and sign it again from a trusted copy"


class SigningKeyError(UserInputError):
    """A signing or public key file that is missing, malformed, of another algorithm, or whose password is wrong."""

    default_hint = "give a P-256 key pair: `toolchain cache keygen DIR` or `cosign generate-key-pair`"


# --- build ------------------------------------------------------------------------------------


class EngineBuildError(ToolchainError):
    def __init__(
        self,
        message: str,
        *,
        cmd: list[str] | None = None,
        returncode: int | None = None,
        log_path: Path | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint or (f"read the build log at {log_path}" if log_path else None))
        self.cmd = cmd
        self.returncode = returncode
        self.log_path = log_path


class BuildDriftError(EngineBuildError):
    """The engine TensorRT-LLM produced does not match what was asked for."""


# --- triton / serve / bench -------------------------------------------------------------------


class TritonRepoError(UserInputError):
    default_hint = "fix the repository (or re-emit it with `toolchain triton SPEC --engine ... --out DIR --force`)"


class ServerError(ToolchainError):
    def __init__(self, message: str, *, log_path: Path | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint or (f"read the server log at {log_path}" if log_path else None))
        self.log_path = log_path


class BenchError(ToolchainError):
    default_hint = "check that the server is up (`toolchain serve DIR`) and the URL/model names are right"


class BenchUnavailableError(BenchError, TransientError):
    """The server to measure could not be reached, timed out, or answered 429/5xx before the run. Exit code 75."""


# --- deploy -----------------------------------------------------------------------------------


class DeployError(UserInputError):
    """A deployment that cannot be written as asked (no pinned container, a host-path registry...)."""

    default_hint = "fix the spec or the `toolchain deploy` options as the message says"


# --- dynamo -----------------------------------------------------------------------------------


class EstimatorMissingError(ToolchainError):
    """NVIDIA AIConfigurator's environment (``.venv-aic``) is missing and ``--estimator aic`` was asked: exit 3."""

    exit_code = 3
    default_hint = "run scripts/setup-aic.sh, or plan with --estimator floor"


class EstimateUnavailableError(EstimatorMissingError):
    """``--estimator aic`` on a cell AIConfigurator's database cannot estimate (a GPU, precision or model it lacks)."""

    default_hint = "plan with --estimator auto (that cell falls back to the roofline floor, with a warning)"


class DynamoMissingError(ToolchainError):
    """NVIDIA Dynamo's environment (``.venv-dynamo``) is not installed: exit 3, like a missing extra."""

    exit_code = 3
    default_hint = "run scripts/setup-dynamo.sh"
