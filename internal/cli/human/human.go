// Package human formats quantities for people: byte counts in binary units
// and durations rounded to what a table needs.
package human

import (
	"fmt"
	"time"
)

// Bytes formats n bytes in binary units: "512 B", "1.5 KiB", "3.0 GiB".
// Negative counts are formatted with a minus sign.
func Bytes(n int64) string {
	if n < 0 {
		return "-" + Bytes(-n)
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= unit
		if f < unit || u == "PiB" {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	panic("unreachable")
}

// Duration formats d rounded to the second below an hour ("4m5s"), and to
// the minute from an hour on ("2h13m"). Negative durations keep their sign.
func Duration(d time.Duration) string {
	if d < 0 {
		return "-" + Duration(-d)
	}
	if d >= time.Hour {
		d = d.Round(time.Minute)
		s := d.String() // "2h13m0s"
		return s[:len(s)-2]
	}
	return d.Round(time.Second).String()
}
