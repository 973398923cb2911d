package svg_test

import (
	"fmt"
	"strings"

	"github.com/seed93a044d1/retry/internal/svg"
)

// A chart with a line, a shaded band and a reference line, written as SVG.
func ExampleChart_Write() {
	c := svg.Chart{
		Title:    "Attempts per second",
		Subtitle: "The limiter holds the line at 200.",
		Series:   []svg.Series{{Name: "attempts", X: []float64{0, 1, 2}, Y: []float64{219, 200, 200}}},
		Bands:    []svg.Band{{X0: 0, X1: 1, Label: "down"}},
		Rules:    []svg.Rule{{Y: 300, Label: "capacity 300/s"}},
	}
	var b strings.Builder
	if err := c.Write(&b); err != nil {
		fmt.Println(err)
		return
	}
	out := b.String()
	fmt.Println(strings.HasPrefix(out, "<svg "), strings.Count(out, "<polyline"), strings.Contains(out, "capacity 300/s"))
	// Output:
	// true 1 true
}
