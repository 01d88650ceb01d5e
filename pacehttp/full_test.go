package pacehttp

import (
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestScriptsRefusedWholeWhenFull runs the quota tests under redistest's
// FullCheck: each script call that would add memory is made on a full
// Redis too (maxmemory, noeviction), where it must fail with OOM and
// change none of its keys (docs/protocol.md, "A full Redis"). quota.lua
// drops the takes that lapsed before it writes the count. (Tests that
// measure time from the wall clock are left out: each call takes a few
// round trips more here.)
func TestScriptsRefusedWholeWhenFull(t *testing.T) {
	redistest.RunFullCheck(t,
		redistest.NamedTest{Name: "QuotaSpread", Test: TestQuotaSpread},
		redistest.NamedTest{Name: "QuotaInFlight", Test: TestQuotaInFlight},
		redistest.NamedTest{Name: "QuotaKnownLimit", Test: TestQuotaKnownLimit},
	)
}
