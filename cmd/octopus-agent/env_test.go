package main

import (
	"strings"
	"testing"
	"time"
)

// TestFlagsFromEnv: the charts' ConfigMap keys (OCTOPUS_<FLAG>) reach the flags, the command
// line wins, and a bad value names its variable.
func TestFlagsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		want     time.Duration
		wantErr  string
		wantElec bool
	}{
		{name: "default", want: 10 * time.Second, wantElec: true},
		{name: "from the environment", env: map[string]string{"OCTOPUS_HEARTBEAT_INTERVAL": "3s", "OCTOPUS_LEADER_ELECT": "false"}, want: 3 * time.Second},
		{name: "the command line wins", args: []string{"--heartbeat-interval=4s"}, env: map[string]string{"OCTOPUS_HEARTBEAT_INTERVAL": "3s"}, want: 4 * time.Second, wantElec: true},
		{name: "a bad value names its variable", env: map[string]string{"OCTOPUS_HEARTBEAT_INTERVAL": "soon"}, wantErr: "$OCTOPUS_HEARTBEAT_INTERVAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &controllerOptions{}
			cmd := controllerCommand(o)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			err := flagsFromEnv(cmd.Flags(), func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.heartbeatInterval != tc.want || o.leaderElect != tc.wantElec {
				t.Errorf("heartbeat interval %v, leader election %v; want %v, %v", o.heartbeatInterval, o.leaderElect, tc.want, tc.wantElec)
			}
		})
	}
}
