package bench

// setHedgeRatios puts hedging's ratios into res: hedged_p999_vs_unhedged, GetFeed's p99.9 with
// hedging on over its p99.9 with hedging off, the same slice of the primary's reads slowed by
// the same amount in both (hedging's effect on the tail it is for), and hedge_extra_load, the
// reads sent to the standby per GetFeed call with hedging on. Either is 0 when its run is
// missing.
func (res *Results) setHedgeRatios() {
	res.Ratios["hedged_p999_vs_unhedged"] = 0
	res.Ratios["hedge_extra_load"] = 0
	var off, on *HedgeResult
	for i := range res.Hedging {
		if res.Hedging[i].Hedging {
			on = &res.Hedging[i]
		} else {
			off = &res.Hedging[i]
		}
	}
	if on != nil {
		res.Ratios["hedge_extra_load"] = on.ExtraLoad
	}
	if on != nil && off != nil {
		res.Ratios["hedged_p999_vs_unhedged"] = ratio(on.GetFeed.P999, off.GetFeed.P999)
	}
}
