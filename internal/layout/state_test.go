package layout

import (
	"testing"
)

func TestParseState(t *testing.T) {
	tests := []struct {
		text    string
		want    State
		wantErr bool
	}{
		{"1795436253625771 2100 1 0 -400000000 0", State{T: 1795436253625771, Seq: 1, Records: []Record{{permits, true, -400000000, 0}}}, false},
		{"1795436253625771 2100 7 c1500.5 -1333333333.333 12", State{T: 1795436253625771, Seq: 7, PauseNS: 1500.5, Records: []Record{{permits, true, -1333333333.333, 12}}}, false},
		{"1795436253625771 2100 3 0 requests 5 6 daily w20415 2.5", State{T: 1795436253625771, Seq: 3, Records: []Record{{"requests", true, 5, 6}, {"daily", false, 20415, 2.5}}}, false},
		{"1795436253625771 2100 3 0", State{T: 1795436253625771, Seq: 3}, false},
		{"1 1795436253625771 2000000000 4 10.000 0 permits -1000.000 0.000", State{T: 1795436253625771, Seq: 4, PauseNS: 10, Records: []Record{{permits, true, -1000, 0}}}, false},
		{"1 1795436253625771 2000000000 4 0.000 1 requests 1.500 0.000 daily 20415 3", State{T: 1795436253625771, Seq: 4, Records: []Record{{"requests", true, 1.5, 0}, {"daily", false, 20415, 3}}}, false},
		{"", State{}, true},
		{"keep", State{}, true},
		{"1795436253625771 2100 3 0 requests 5", State{}, true},
		{"1 1795436253625771 2000000000 4 0.000", State{}, true},
		{"1795436253625771 2100 x 0", State{}, true},
	}
	for _, tt := range tests {
		got, err := ParseState(tt.text)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseState(%q) error = %v, want error %v", tt.text, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if got.T != tt.want.T || got.Seq != tt.want.Seq || got.PauseNS != tt.want.PauseNS || len(got.Records) != len(tt.want.Records) {
			t.Errorf("ParseState(%q) = %+v, want %+v", tt.text, got, tt.want)
			continue
		}
		for i := range got.Records {
			if got.Records[i] != tt.want.Records[i] {
				t.Errorf("ParseState(%q) record %d = %+v, want %+v", tt.text, i, got.Records[i], tt.want.Records[i])
			}
		}
	}
}
