package osbapi

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Quantities are written as Kubernetes writes them ("500m", "1.5",
// "512Mi", "2G"). k8s.io/apimachinery's resource.Quantity parses them, but
// it would bring the Kubernetes API machinery into the binary for two
// fields; this is the subset the spec's resourceLimits use.

// multiplier is the value of a quantity's suffix; ok is false for none
// of Kubernetes' (the exponent forms "1e3" are not taken either).
func multiplier(suffix string) (_ *big.Rat, ok bool) {
	var n, d int64 = 1, 1
	switch suffix {
	case "":
	case "m":
		d = 1000
	case "k":
		n = 1e3
	case "M":
		n = 1e6
	case "G":
		n = 1e9
	case "T":
		n = 1e12
	case "Ki":
		n = 1 << 10
	case "Mi":
		n = 1 << 20
	case "Gi":
		n = 1 << 30
	case "Ti":
		n = 1 << 40
	default:
		return nil, false
	}
	return big.NewRat(n, d), true
}

// parseQuantity reads a non-negative decimal number with an optional
// suffix.
func parseQuantity(s string) (*big.Rat, error) {
	num := strings.TrimRight(s, "kmMGTi")
	suffix := s[len(num):]
	mult, ok := multiplier(suffix)
	if !ok || num == "" || len(s) > 32 || strings.ContainsAny(num, "eE+-/") {
		return nil, fmt.Errorf("%q is not a quantity (like 500m, 2, 512Mi or 1Gi)", s)
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return nil, fmt.Errorf("%q is not a quantity (like 500m, 2, 512Mi or 1Gi)", s)
	}
	return v.Mul(v, mult), nil
}

// ParseCPU reads a CPU quantity ("500m", "1", "1.5") as thousandths of
// a core, rounded up.
func ParseCPU(s string) (int, error) {
	v, err := parseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("cpu: %w", err)
	}
	return ceilInt(v.Mul(v, big.NewRat(1000, 1)))
}

// ParseMemory reads a memory quantity ("512Mi", "2Gi", "1G", bytes) as
// MiB, rounded up.
func ParseMemory(s string) (int, error) {
	v, err := parseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	return ceilInt(v.Quo(v, big.NewRat(1<<20, 1)))
}

// ceilInt is v rounded up, refused past an int32 (no host has that many
// cores or MiB).
func ceilInt(v *big.Rat) (int, error) {
	q, r := new(big.Int).QuoRem(v.Num(), v.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > math.MaxInt32 {
		return 0, fmt.Errorf("%s is too large", v.FloatString(0))
	}
	return int(q.Int64()), nil
}
