package reserve

import (
	"testing"
)

func TestParseState(t *testing.T) {
	tests := []struct {
		text    string
		want    keyState
		wantErr bool
	}{
		{"1795436253625771 2100 1 0 -400000000 0", keyState{t: 1795436253625771, seq: 1, records: []stateRecord{{PermitsUnit, true, -400000000, 0}}}, false},
		{"1795436253625771 2100 7 c1500.5 -1333333333.333 12", keyState{t: 1795436253625771, seq: 7, pauseNS: 1500.5, records: []stateRecord{{PermitsUnit, true, -1333333333.333, 12}}}, false},
		{"1795436253625771 2100 3 0 requests 5 6 daily w20415 2.5", keyState{t: 1795436253625771, seq: 3, records: []stateRecord{{"requests", true, 5, 6}, {"daily", false, 20415, 2.5}}}, false},
		{"1795436253625771 2100 3 0", keyState{t: 1795436253625771, seq: 3}, false},
		{"1 1795436253625771 2000000000 4 10.000 0 permits -1000.000 0.000", keyState{t: 1795436253625771, seq: 4, pauseNS: 10, records: []stateRecord{{PermitsUnit, true, -1000, 0}}}, false},
		{"1 1795436253625771 2000000000 4 0.000 1 requests 1.500 0.000 daily 20415 3", keyState{t: 1795436253625771, seq: 4, records: []stateRecord{{"requests", true, 1.5, 0}, {"daily", false, 20415, 3}}}, false},
		{"", keyState{}, true},
		{"keep", keyState{}, true},
		{"1795436253625771 2100 3 0 requests 5", keyState{}, true},
		{"1 1795436253625771 2000000000 4 0.000", keyState{}, true},
		{"1795436253625771 2100 x 0", keyState{}, true},
	}
	for _, tt := range tests {
		got, err := parseState(tt.text)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseState(%q) error = %v, want error %v", tt.text, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if got.t != tt.want.t || got.seq != tt.want.seq || got.pauseNS != tt.want.pauseNS || len(got.records) != len(tt.want.records) {
			t.Errorf("parseState(%q) = %+v, want %+v", tt.text, got, tt.want)
			continue
		}
		for i := range got.records {
			if got.records[i] != tt.want.records[i] {
				t.Errorf("parseState(%q) record %d = %+v, want %+v", tt.text, i, got.records[i], tt.want.records[i])
			}
		}
	}
}
