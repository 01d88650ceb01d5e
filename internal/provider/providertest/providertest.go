// Package providertest holds the checks tests make on a run against the
// test provider (package provider), apart from it, so that the programs
// that serve the provider (the examples, pacerbench) do not link package
// testing.
package providertest

import (
	"testing"

	"github.com/pacer-go/pacer/internal/provider"
)

// ExpectRefusals is a test's check that a provider allowing limit calls in
// any second refuses a fleet paced above it (or the test's other checks
// could not fail). run runs the fleet once and returns the calls per host
// (as provider.MustRefuse counts them: every call, when none was refused), the
// calls refused, and the calls per second held after the burst. A run
// with a 429 passes; one without that must have drawn some (provider.MustRefuse)
// fails the test; one too slow to (a machine too loaded to reach the
// provider's limit) is run again once, then the test is skipped, saying
// so. The caller's own checks then look at the last run.
func ExpectRefusals(t testing.TB, limit, burst int, run func() (calls, refused int, rate float64)) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		calls, refused, rate := run()
		switch {
		case refused > 0:
			return
		case provider.MustRefuse(calls, burst, rate, limit):
			t.Errorf("no 429 from a provider allowing %d calls in any second, though some second of the run held more (%d calls a host at %.2f/s)", limit, calls, rate)
			return
		case attempt == 2:
			t.Skipf("no run came close enough to the provider's limit to show a 429 (%.2f calls/s a host, %d allowed in any second): the machine is too loaded for this check", rate, limit)
		}
	}
}
