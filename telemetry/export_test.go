package telemetry

// RecordCount returns how many destinations r holds counts for.
func RecordCount(r *Recorder) int {
	n := 0
	r.records.Range(func(_, _ any) bool { n++; return true })
	return n
}
