package lua_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestScriptsRefusedWholeWhenFull runs every conformance test under
// redistest's FullCheck: each script call that would add memory is made on
// a full Redis too (maxmemory, noeviction), where it must fail with OOM and
// change none of its keys (docs/protocol.md, "A full Redis").
// TestConformanceFairLapsed is the case of the combination runner's seed
// 16: fair.lua dropped a tenant whose waiting had lapsed (a removal, which
// a full Redis lets through) before it booked, so a full Redis let the
// whole call through.
func TestScriptsRefusedWholeWhenFull(t *testing.T) {
	redistest.RunFullCheck(t,
		redistest.NamedTest{Name: "Spacing", Test: TestConformanceSpacing},
		redistest.NamedTest{Name: "Formats", Test: TestConformanceFormats},
		redistest.NamedTest{Name: "Window", Test: TestConformanceWindow},
		redistest.NamedTest{Name: "Cancel", Test: TestConformanceCancel},
		redistest.NamedTest{Name: "AdjustNewLineage", Test: TestConformanceAdjustNewLineage},
		redistest.NamedTest{Name: "Pause", Test: TestConformancePause},
		redistest.NamedTest{Name: "LostHorizon", Test: TestConformanceLostHorizon},
		redistest.NamedTest{Name: "Stale", Test: TestConformanceStale},
		redistest.NamedTest{Name: "BadArguments", Test: TestConformanceBadArguments},
		redistest.NamedTest{Name: "NaN", Test: TestConformanceNaN},
		redistest.NamedTest{Name: "WrongType", Test: TestConformanceWrongType},
		redistest.NamedTest{Name: "Format3", Test: TestConformanceFormat3},
		redistest.NamedTest{Name: "HeartbeatOrder", Test: TestConformanceHeartbeatOrder},
		redistest.NamedTest{Name: "Heartbeat", Test: TestConformanceHeartbeat},
		redistest.NamedTest{Name: "Calendar", Test: TestConformanceCalendar},
		redistest.NamedTest{Name: "FairGroups", Test: TestConformanceFairGroups},
		redistest.NamedTest{Name: "PlainRequests", Test: TestConformancePlainRequests},
		redistest.NamedTest{Name: "FairLapsed", Test: TestConformanceFairLapsed},
		redistest.NamedTest{Name: "ClaimStale", Test: TestConformanceClaimStale},
		redistest.NamedTest{Name: "ResumeWindows", Test: TestConformanceResumeWindows},
		redistest.NamedTest{Name: "SeatsRenew", Test: TestSeatsRenewKeepsLaterTickets},
		redistest.NamedTest{Name: "ProtocolDoc", Test: TestProtocolDoc},
	)
}
