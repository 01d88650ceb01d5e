package reserve_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestScriptsRefusedWholeWhenFull runs tests of fair turns, settles,
// cancels and seats under redistest's FullCheck: each script call that
// would add memory is made on a full Redis too (maxmemory, noeviction),
// where it must fail with OOM and change none of its keys
// (docs/protocol.md, "A full Redis"). seats.lua may drop gone holders
// and tickets before it takes seats; adjust.lua moves a tenant's pass.
func TestScriptsRefusedWholeWhenFull(t *testing.T) {
	redistest.RunFullCheck(t,
		redistest.NamedTest{Name: "FairSettleReachesTurns", Test: TestFairSettleReachesTurns},
		redistest.NamedTest{Name: "SeatsInOrder", Test: TestSeatsInOrder},
		redistest.NamedTest{Name: "SeatsTryAndCancel", Test: TestSeatsTryAndCancel},
		redistest.NamedTest{Name: "SeatsWithRate", Test: TestSeatsWithRate},
	)
}
