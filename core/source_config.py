"""What a source of documents is configured with: one config class per kind, one registry.

`SourceConfig` is a union discriminated by `kind`: `FolderConfig` (a folder), `GitConfig` (a
git repository at a ref) and `S3Config` (a bucket and key prefix of an S3-compatible object
store). A `[[sources]]` table without `kind` is read as it always was: `git` set makes it a
repository, `s3` a bucket, anything else a folder. Each kind parses its own command-line form
(`source_from_argument`: `s3://bucket/prefix`, `git+file:///repo@ref`, else a path), tried
in the order of `SOURCE_KINDS`, the one registry of kinds; `connectors.sources` maps the same
kind names to the classes that open them.

No secret is ever a field here: an S3 source names a credentials profile at most, and the
keys themselves are read where boto3 reads them (its environment variables, its shared
credentials file), so a config, a snapshot or a log never holds one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from ragstream.core.language import LANGUAGES

GIT_SCHEME = "git+file://"  # a git source on the command line: `git+file:///repo@ref`
S3_SCHEME = "s3://"  # an S3 source on the command line and in locators: `s3://bucket/prefix`


def git_spec(text: str) -> tuple[Path, str] | None:
    """(repository, ref) of a `git+file:///path/to/repo@ref` argument (ref default HEAD), or
    None for anything else. One slash after the scheme is accepted too."""
    if not text.startswith("git+file:"):
        return None
    rest = "/" + text[len("git+file:") :].lstrip("/")
    repo, at, ref = rest.rpartition("@")
    if not at or "/" in ref:
        repo, ref = rest, "HEAD"
    return Path(repo), ref or "HEAD"


def s3_spec(text: str) -> tuple[str, str] | None:
    """(bucket, key prefix) of an `s3://bucket/prefix` URI, or None for anything else. The
    prefix has no leading slash and, when not empty, ends with one (a folder of keys)."""
    if not text.startswith(S3_SCHEME):
        return None
    bucket, _, prefix = text[len(S3_SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"{text!r} names no bucket (expected s3://bucket/prefix)")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


class _SourceFields(BaseModel):
    """What every kind has: a name (it prefixes every doc_id), a tenant (it tags every
    point), whether file permissions are mirrored, and the documents' language."""

    model_config = ConfigDict(extra="forbid")
    name: str
    tenant: str = ""
    permissions: Literal["off", "posix"] = "off"
    # the language its documents are written in (ISO 639-1: "zh", "ja", "de", ...): which
    # answer path reads their text (`core.language`); None: detected from each chunk's text
    language: str | None = None

    @field_validator("language")
    @classmethod
    def _known_language(cls, code: str | None) -> str | None:
        if code is not None and code.split("-")[0].casefold() not in LANGUAGES:
            raise ValueError(f"language {code!r} is none of {sorted(LANGUAGES)} (ISO 639-1)")
        return code

    @model_validator(mode="after")
    def _posix_of_a_folder(self) -> _SourceFields:
        if self.permissions == "posix" and getattr(self, "kind", "folder") != "folder":
            raise ValueError(
                f"source {self.name!r}: permissions = 'posix' mirrors a folder's file "
                f"permissions; a {getattr(self, 'kind', '')} source has none to mirror"
            )
        return self


class _OnDisk(_SourceFields):
    """A kind whose documents are under a path of this machine (`root`)."""

    root: Path

    @property
    def location(self) -> str:
        """Where the documents are, as `Source.root` names it."""
        return str(self.root.expanduser().resolve())


class FolderConfig(_OnDisk):
    """A folder (`root`) and everything under it; `permissions = "posix"` mirrors each file's
    permissions onto its chunks (docs/guide/permissions.md)."""

    kind: Literal["folder"] = "folder"

    @classmethod
    def from_argument(cls, text: str) -> dict[str, Any] | None:
        """The fields of a folder named on the command line (every argument can be one)."""
        root = Path(text).expanduser().resolve()
        return {"root": root, "name": root.name or "root"}


class GitConfig(_OnDisk):
    """A git repository at a ref (`git`: `file:///path/to/repo`, `git+file://...` or a path;
    `ref`: a branch, tag or commit, default HEAD). `root` is the repository's path, derived
    from `git` when not given."""

    kind: Literal["git"] = "git"
    git: str
    ref: str = "HEAD"

    @model_validator(mode="before")
    @classmethod
    def _root_of_git(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("git") and not data.get("root"):
            url = str(data["git"])
            spec = git_spec(url if url.startswith("git+") else "git+" + url)
            data = {**data, "root": spec[0] if spec else Path(url)}
        return data

    @classmethod
    def from_argument(cls, text: str) -> dict[str, Any] | None:
        spec = git_spec(text)
        if spec is None:
            return None
        root = spec[0].expanduser().resolve()
        return {"root": root, "git": root.as_uri(), "ref": spec[1], "name": root.name or "root"}


class S3Config(_SourceFields):
    """The objects under a key prefix of a bucket (`s3`: `s3://bucket/prefix`) in an
    S3-compatible store. `endpoint_url`, `region` and `profile` override what boto3 reads
    from its environment (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_PROFILE`, the access keys)
    and its shared config files; `poll_s`: how often `watch` lists the prefix again;
    `events_queue`: the URL of an SQS queue the bucket sends its event notifications to,
    which `watch` consumes, so a change is read within a second or two, not a poll later."""

    kind: Literal["s3"] = "s3"
    s3: str
    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    poll_s: float = Field(default=10.0, gt=0)
    events_queue: str | None = None

    @field_validator("s3")
    @classmethod
    def _an_s3_uri(cls, uri: str) -> str:
        if s3_spec(uri) is None:
            raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
        return uri

    @property
    def bucket(self) -> str:
        return self._spec()[0]

    @property
    def prefix(self) -> str:
        return self._spec()[1]

    def _spec(self) -> tuple[str, str]:
        spec = s3_spec(self.s3)
        assert spec is not None  # checked when the config was made
        return spec

    @property
    def location(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"

    @classmethod
    def from_argument(cls, text: str) -> dict[str, Any] | None:
        spec = s3_spec(text)
        if spec is None:
            return None
        bucket, prefix = spec
        return {"s3": text, "name": prefix.rstrip("/").rsplit("/", 1)[-1] or bucket}


# the one registry of kinds: a command-line argument is tried against each in this order
SOURCE_KINDS: dict[str, type[FolderConfig] | type[GitConfig] | type[S3Config]] = {
    "s3": S3Config,
    "git": GitConfig,
    "folder": FolderConfig,
}


def kind_of(data: Any) -> str:
    """The kind a `[[sources]]` table (or a config) is: its `kind`, else `git` when it names a
    repository, `s3` when it names a bucket, else a folder."""
    if isinstance(data, dict):
        if data.get("kind"):
            return str(data["kind"])
        return "git" if data.get("git") else "s3" if data.get("s3") else "folder"
    return str(getattr(data, "kind", "folder"))


SourceConfig = Annotated[
    Annotated[FolderConfig, Tag("folder")]
    | Annotated[GitConfig, Tag("git")]
    | Annotated[S3Config, Tag("s3")],
    Discriminator(kind_of),
]
SOURCE_CONFIG_MODELS: tuple[type[BaseModel], ...] = (FolderConfig, GitConfig, S3Config)


def source_from_argument(text: str) -> dict[str, Any]:
    """The fields of the source a command-line argument names: the first kind of
    `SOURCE_KINDS` that reads it (a folder reads anything), with its kind."""
    for kind, config in SOURCE_KINDS.items():
        fields = config.from_argument(text)
        if fields is not None:
            return {**fields, "kind": kind}
    raise AssertionError("a folder reads any argument")  # pragma: no cover
