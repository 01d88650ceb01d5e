// Package integration holds tests that cross processes and packages: a
// fleet of worker processes (the test binary, re-run) pacing one key through
// real Redis deployments while the test breaks them.
package integration
