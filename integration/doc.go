// Package integration holds tests that cross processes and packages: a fleet
// of worker processes (the test binary, re-run) pacing one key through real
// Redis deployments while the tests break them (faults_test.go); tasks
// enqueued by package scheduler and run by package worker's middleware on
// real asynq servers (asynq_test.go); and the examples, built with go build
// and run as subprocesses against a real Redis, judged by the summary line
// they print (examples_test.go).
package integration
