// Package integration holds tests that cross packages and processes: here,
// tasks enqueued by package scheduler and run by package worker's middleware
// on real asynq servers.
package integration
