package worker

import (
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC)
	def := 1500 * time.Millisecond
	tests := []struct {
		h    string
		want time.Duration
	}{
		{"", def},
		{"  ", def},
		{"0", def},
		{"-3", def},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"99999999999", 24 * time.Hour},
		{"1.5", def},
		{"soon", def},
		{"Sun, 22 Nov 2026 01:02:33 GMT", 30 * time.Second},
		{"Sun, 22 Nov 2026 01:02:00 GMT", def}, // in the past
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.h, now, def); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.h, got, tt.want)
		}
	}
}
