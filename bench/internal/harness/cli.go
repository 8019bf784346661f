package harness

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/hutch-sandbox/hutch/internal/template"
)

// Main runs realMain as root inside the harness's private mount namespace
// (re-executing itself there first) and exits with its code; script names
// the entry point to use instead when not root.
func Main(prog, script string, realMain func() int) {
	if !InMountNS() {
		if os.Geteuid() != 0 {
			fmt.Fprintf(os.Stderr, "%s: run as root (%s)\n", prog, script)
			os.Exit(1)
		}
		os.Exit(ReexecInMountNS())
	}
	os.Exit(realMain())
}

// TemplatesDir is where Hutch's templates are: $HUTCH_TEMPLATES or the
// default.
func TemplatesDir() string {
	if d := os.Getenv("HUTCH_TEMPLATES"); d != "" {
		return d
	}
	return template.DefaultDir
}

// ParseOnly parses an -only flag (comma-separated row keys); nil means all
// rows. Unknown keys are an error naming the known ones.
func ParseOnly(only string, known []string) (map[string]bool, error) {
	if only == "" {
		return nil, nil
	}
	set := map[string]bool{}
	for _, k := range strings.Split(only, ",") {
		k = strings.TrimSpace(k)
		found := false
		for _, kk := range known {
			found = found || kk == k
		}
		if !found {
			return nil, fmt.Errorf("-only: unknown row %q (known: %s)", k, strings.Join(known, ","))
		}
		set[k] = true
	}
	return set, nil
}

// RemoveLeftoverOCI deletes the runc and crun containers whose ids start
// with prefix (left by a killed earlier run), crun's inside legacy when
// given (crun needs the namespace without the cgroup2 mount; without one,
// crun is skipped). run runs a command and returns its output; found is
// told each tool's removed ids.
func RemoveLeftoverOCI(legacy *LegacyCgroupNS, prefix string, run func(args ...string) ([]byte, error), found func(tool string, ids []string)) {
	for _, tool := range []string{"runc", "crun"} {
		do := func(f func()) { f() }
		if tool == "crun" {
			if legacy == nil {
				continue
			}
			do = legacy.Do
		}
		do(func() {
			out, err := run(tool, "list", "-q")
			if err != nil {
				return
			}
			var left []string
			for _, id := range strings.Fields(string(out)) {
				if strings.HasPrefix(id, prefix) {
					left = append(left, id)
					run(tool, "delete", "-f", id)
				}
			}
			if len(left) > 0 && found != nil {
				found(tool, left)
			}
		})
	}
}

// PrintTable prints rows as aligned columns: numbers right-aligned, the
// first column and those in left left-aligned, the last column as it is.
// A row of one cell is a heading, printed as it is.
func PrintTable(rows [][]string, left ...int) {
	var width []int
	for _, row := range rows {
		if len(row) == 1 {
			continue
		}
		for i, cell := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	isLeft := map[int]bool{0: true}
	for _, i := range left {
		isLeft[i] = true
	}
	for _, row := range rows {
		if len(row) == 1 {
			fmt.Println(row[0])
			continue
		}
		var sb strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", max(0, width[i]-utf8.RuneCountInString(cell)))
			switch {
			case i == 0:
				sb.WriteString(cell + pad)
			case i == len(row)-1 && !isLeft[i]:
				sb.WriteString("  " + cell)
			case isLeft[i]:
				sb.WriteString("  " + cell + pad)
			default:
				sb.WriteString("  " + pad + cell)
			}
		}
		fmt.Println(strings.TrimRight(sb.String(), " "))
	}
}
