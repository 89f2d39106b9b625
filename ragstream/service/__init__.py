"""The index as a service: one protocol, a local and a remote implementation, one `connect`.

base     the `IndexService` and `ServedService` protocols and the types their methods share
served   `ServedIndex`: the index a process holds open, scoped per caller's tenants
connect  `connect()`: the recorded-endpoint rule, the only copy
local    `LocalIndex`: an embedded data dir opened in this process
remote   `RemoteIndex`: a running server over HTTP (blocking); exports `AsyncRemoteIndex`
remote_calls  the API's routes as `Call`s, their replies, retries and the `Endpoint` base
remote_async  `AsyncRemoteIndex`: `RemoteIndex` over asyncio, generated from it (`make generate`)
client_async  `AsyncClient`: `Client` over asyncio, generated from it; `ragstream.client` exports it
stores   opening an embedded data dir's stores without any model
ingest   sync, watch, gc, rebuild_lexical, status, query_log over a data dir
audit    verify and the per-file ledger over open stores
reindex  `Maintainer`: the blue/green reindex commands over open sides
status   the `StatusReport` of open stores
feed     `OutcomeFeed`: sync outcomes relayed live to subscribers
snapshots  take, list, verify, restore (and schedule) snapshots; migrate a data dir
snapshot_points  a server-backed index's points read into a snapshot and loaded from one
exports  export an index as open records, import one into a new data dir
periodic  `every`: a task a watch repeats on an interval (scheduled audits and snapshots)
"""
