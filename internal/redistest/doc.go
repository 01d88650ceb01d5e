// Package redistest gives tests a real Redis to talk to.
//
// Every helper takes a testing.TB and ties the lifetime of what it starts to
// that test: processes are killed and reaped, containers terminated, clients
// closed and temporary directories removed through t.Cleanup. Servers only
// ever listen on 127.0.0.1.
//
// [New] finds a server in this order:
//
//  1. the server named by the REDIS_URL environment variable. It is shared
//     with whoever else uses it, so it is never flushed: use [Prefix] to keep
//     keys apart;
//  2. a throwaway redis-server process from PATH, on a free loopback port,
//     with persistence off and its own temporary directory;
//  3. a "redis:7" container started with testcontainers-go, when a Docker
//     engine answers (set REDISTEST_DOCKER=0 to never try Docker);
//  4. otherwise the test is skipped, unless the CI environment variable is
//     non-empty, in which case a missing Redis fails the test.
//
// [NewPreferContainer] turns the order around for tests that should use a
// stock Redis image whenever they can: a container when a Docker engine
// answers, else New's order above; with REDISTEST_DOCKER=require, a
// container or a failure. Every [Server], whatever its source, has an Addr
// (host:port) and a URL (redis://host:port/db) for child processes.
//
// [NewProcess] always starts its own redis-server (for tests that need a
// server nobody else uses, or that will stop or pause it; package
// internal/redisproc starts it, and programs use that package directly),
// and [NewCluster] starts a Redis Cluster of several redis-server processes
// joined with redis-cli. Both follow the same skip-or-fail rule when the
// binaries are missing from PATH.
//
// For fault-injection tests:
//
//   - [Server.Stop], [Server.Restart], [Server.Freeze] and [Server.Thaw] kill,
//     restart (empty, on the same port), SIGSTOP and SIGCONT a server from
//     [NewProcess];
//   - [NewSentinel] starts a master, a replica and three Sentinels, with
//     [Sentinel.KillMaster] and [Sentinel.WaitFailover];
//   - [NewClusterReplicas] starts a Redis Cluster whose masters have
//     replicas, with [Cluster.MasterFor], [Cluster.KillNode] and
//     [Cluster.WaitSlotServed];
//   - [NewProxy] puts a Toxiproxy in front of any address to add latency,
//     hang, reset or refuse connections.
//
// [NewMiniredis] starts a miniredis instead. It is not a real Redis (its
// Lua and many edge cases differ) and is meant only for tests that need to
// move time with FastForward, or that run on what the examples embed.
//
// The container, the proxy and miniredis run in child processes: launchers
// of the internal/testkit module, which package internal/launcher builds
// with `go run` and runs from the go command's build cache. This module's
// go.mod so lists neither testcontainers-go nor
// Toxiproxy nor miniredis.
//
// Where each server came from is logged (go test -v), and, when the
// REDISTEST_REPORT environment variable names a file, appended to it as a
// line "<test binary> <test> <source> <kind> <addr>", with source one of
// REDIS_URL, redis-server, testcontainers and miniredis; .ci/run sums the
// file up.
package redistest
