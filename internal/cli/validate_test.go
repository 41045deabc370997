package cli

import (
	"strings"
	"testing"
)

// validateCase is one row of a table test of a command's Validate: valid options changed by
// modify, and the error they must give (a substring of it), or none when wantErr is empty.
type validateCase[O any] struct {
	name    string
	modify  func(*O)
	wantErr string
}

// testValidate runs each case as a subtest on a fresh copy of valid(). The commands' Validate
// tests (dashboard, diagnose, verify, bench) all check errors this way: the substring that
// names the flag and the fix, not the whole message.
func testValidate[O any, P interface {
	*O
	Validate() error
}](t *testing.T, valid func() O, cases []validateCase[O]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.modify(&o)
			err := P(&o).Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
