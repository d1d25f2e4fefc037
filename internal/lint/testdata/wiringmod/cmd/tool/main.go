// Command tool shows what a command may and may not compute.
package main

import (
	"fmt"
	"time"

	"example.com/wiringmod/rank"
)

type pin struct{ recency, affinity float64 }

func main() {
	pins := []pin{{1, 2}, {3, 4}}
	// Allowed: calling the library, unit conversions with a constant operand, integers.
	fmt.Println(rank.Score(pins[0].recency, pins[0].affinity))
	fmt.Printf("%.1f%% %.1fms\n", 100*pins[0].recency, float64(time.Second)/float64(time.Millisecond))
	n := 0
	for range pins {
		n += 2
	}
	// Not allowed: a scoring loop in the command.
	var best, total float64
	for _, p := range pins {
		s := p.recency*0.7 + p.affinity*0.3 // line 25: + of two values
		total += s                          // line 26
		best = max(best, s/total)           // line 27: / of two values
	}
	fmt.Println(best, n)
}
