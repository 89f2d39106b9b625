"""Floor 1: settings, shared pydantic models, identities and versions, telemetry.

Nothing here imports any other ragstream package.

- `answers`: the query contract's models (request, answer, refusal, citations).
- `cpus`: the CPUs this process may run on (what thread pools and model sessions size by).
- `errors`: the errors a user can cause or fix, each with its CLI exit code.
- `export`: one live chunk as `export` writes it and `import` reads it (the open record).
- `filters`: the one filter language of every face: its forms, its check, its meaning.
- `ids`: doc ids, content hashes and point ids.
- `jsonfile`: small JSON files written whole (temp file + rename) and read back.
- `language`: what a text is written in, and what reading it takes (CJK bigrams, sentence
  ends, which trained models read it).
- `memory`: handing freed heap memory back to the OS after a large ingest batch.
- `metadata`: a document's own metadata as typed fields, and which reading wins.
- `models`: the models on every arrow of the ingest pipeline and the reindex records.
- `permissions`: a file's POSIX permissions reduced to the principals that may read it, and
  who a request reads as.
- `rwlock`: a readers–writer lock (queries read at once; a write waits for them).
- `settings`: the settings (environment over TOML file over defaults).
- `settings_check`: the settings' machinery: typos refused, each value's source reported.
- `source_config`: one config class per kind of source (folder, git, s3), one registry.
- `snapshot`: a snapshot's manifest and listing, and the storage format version.
- `telemetry`: the OpenTelemetry tracer, exporters and the drift gauge.
"""
