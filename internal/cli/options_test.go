package cli

import (
	"bytes"
	"io"
	"testing"
)

func TestOutputFormatPrint(t *testing.T) {
	v := struct {
		Name string `json:"name"`
	}{"east"}
	render := func(w io.Writer) error {
		_, err := io.WriteString(w, "NAME\neast\n")
		return err
	}
	tests := []struct {
		format outputFormat
		want   string
	}{
		{outputTable, "NAME\neast\n"},
		{outputJSON, "{\n  \"name\": \"east\"\n}\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.format), func(t *testing.T) {
			var buf bytes.Buffer
			if err := tt.format.print(&buf, v, render); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Fatalf("got %q, want %q", buf.String(), tt.want)
			}
		})
	}
}
