package dockerfile

import (
	"strings"
	"testing"
)

// FuzzParse: any Dockerfile parses into a plan or is refused with an
// error, never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"FROM debian:12\nRUN apt-get update && apt-get install -y curl\nENV A=1 B=\"two words\"\nWORKDIR /app\nCOPY . /app\nUSER user\nCMD [\"python3\", \"app.py\"]\n",
		"ARG V=1\nFROM x:${V}\nRUN echo $V \\\n  && true\n",
		"FROM golang AS build\nRUN go build\nFROM debian\n",
		"FROM x\nRUN --mount=type=cache,target=/c true\n",
		"# syntax=docker/dockerfile:1\nFROM x\nRUN <<EOF\necho hi\nEOF\n",
		"",
	} {
		f.Add(s, "V=2")
	}
	f.Fuzz(func(t *testing.T, df, arg string) {
		k, v, _ := strings.Cut(arg, "=")
		Parse(strings.NewReader(df), map[string]string{k: v})
	})
}
