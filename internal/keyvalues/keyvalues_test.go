package keyvalues

import (
	"strconv"
	"sync"
	"testing"
)

// TestAdmit: the first max values are admitted for good, later ones are
// Other; -1 admits every value; concurrent admits never pass the bound.
func TestAdmit(t *testing.T) {
	s := New(3)
	for i, want := range []string{"a", "b", "a", "c", Other, "b", Other, "c"} {
		v := []string{"a", "b", "a", "c", "d", "b", "e", "c"}[i]
		if got := s.Admit(v); got != want {
			t.Errorf("Admit(%q) = %q, want %q", v, got, want)
		}
	}
	all := New(-1)
	for i := range 1000 {
		if v := strconv.Itoa(i); all.Admit(v) != v {
			t.Fatalf("no bound: Admit(%q) = %q", v, all.Admit(v))
		}
	}
	for range 20 {
		s := New(10)
		var mu sync.Mutex
		own := map[string]bool{}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					v := strconv.Itoa(g*50 + i)
					if s.Admit(v) == v {
						mu.Lock()
						own[v] = true
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if len(own) != 10 {
			t.Fatalf("%d values admitted by 8 goroutines, want the bound, 10", len(own))
		}
		for v := range own {
			if s.Admit(v) != v {
				t.Fatalf("%q admitted, then not", v)
			}
		}
	}
}
