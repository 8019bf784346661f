package sdk

import "testing"

func TestShellStatus(t *testing.T) {
	tests := []struct {
		res  CommandResult
		want int
	}{
		{CommandResult{ExitCode: 0}, 0},
		{CommandResult{ExitCode: 7}, 7},
		{CommandResult{ExitCode: -1, Error: "signal: killed"}, 137},
		{CommandResult{ExitCode: -1, Error: "signal: terminated"}, 143},
		{CommandResult{ExitCode: -1, Error: "signal: interrupt"}, 130},
		{CommandResult{ExitCode: -1, Error: "signal: segmentation fault"}, 139},
		{CommandResult{ExitCode: -1, Error: "something else"}, 137},
		{CommandResult{ExitCode: -1}, 137},
	}
	for _, tt := range tests {
		if got := tt.res.ShellStatus(); got != tt.want {
			t.Errorf("%+v.ShellStatus() = %d, want %d", tt.res, got, tt.want)
		}
	}
}
