package granted_test

import (
	"context"
	"testing"

	"github.com/pacer-go/pacer/internal/granted"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestBooked: a reservation Redis granted tells when the script ran, on
// the server's clock, and the share it was booked at; the fields Booked
// and Slot read by name are still there.
func TestBooked(t *testing.T) {
	s := redistest.New(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), RequireRedis: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	before, err := s.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Reserve(ctx, "k", reserve.Limit{Rate: 10, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ran, share := granted.Booked(r)
	if ran < before.UnixNano() || ran > after.UnixNano() || share != "1" {
		t.Errorf("Booked = %d, %q; want a time in [%d, %d] (Redis's TIME around the call) and the whole share \"1\"", ran, share, before.UnixNano(), after.UnixNano())
	}
	if slot, exact := granted.Slot(r); !exact || slot < ran {
		t.Errorf("Slot = %d, %v; want an exact slot no earlier than the script ran (%d)", slot, exact, ran)
	}
}
