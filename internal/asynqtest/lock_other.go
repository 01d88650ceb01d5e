//go:build !unix

package asynqtest

import "testing"

// lockMachine does nothing outside Unix: tests of several packages may then
// run their asynq fleets at the same time.
func lockMachine(t testing.TB) {}
