// Package integration holds tests that cross processes and packages: a fleet
// of worker processes (the test binary, re-run) pacing one key through real
// Redis deployments while the tests break them (faults_test.go), and tasks
// enqueued by package scheduler and run by package worker's middleware on
// real asynq servers (asynq_test.go).
package integration
