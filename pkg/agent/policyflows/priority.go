package policyflows

import "fmt"

// priorityAllocator gives the rules of one table strictly decreasing OpenFlow
// priorities in evaluation order, inside [min, max]. It keeps a rule's
// previous priority when the order still allows it and there is room, so an
// inserted or removed policy moves few flows; when there is no room between
// two kept neighbours it spreads every rule evenly again.
type priorityAllocator struct {
	min, max uint16
	prev     map[string]uint16
}

func newPriorityAllocator(min, max uint16) *priorityAllocator {
	return &priorityAllocator{min: min, max: max, prev: map[string]uint16{}}
}

// assign returns a priority per key; keys are in evaluation order (first =
// highest priority).
func (a *priorityAllocator) assign(keys []string) (map[string]uint16, error) {
	n := len(keys)
	span := int(a.max) - int(a.min) + 1
	if n > span {
		return nil, fmt.Errorf("%d rules in one table exceed the %d available priorities", n, span)
	}
	out := make(map[string]uint16, n)
	// Keep a greedy decreasing subsequence of the previous priorities.
	kept := make([]bool, n)
	last := int(a.max) + 1
	for i, k := range keys {
		if p, ok := a.prev[k]; ok && int(p) < last && int(p) >= int(a.min)+(n-1-i) && int(p) <= int(a.max)-i {
			kept[i] = true
			last = int(p)
		}
	}
	ok := true
	for i := 0; i < n && ok; {
		if kept[i] {
			out[keys[i]] = a.prev[keys[i]]
			i++
			continue
		}
		j := i
		for j < n && !kept[j] {
			j++
		}
		hi := int(a.max) + 1
		if i > 0 {
			hi = int(out[keys[i-1]])
		}
		lo := int(a.min) - 1
		if j < n {
			lo = int(a.prev[keys[j]])
		}
		gap := hi - lo - 1
		cnt := j - i
		if gap < cnt {
			ok = false
			break
		}
		step := (gap + 1) / (cnt + 1)
		if step < 1 {
			step = 1
		}
		for k := 0; k < cnt; k++ {
			out[keys[i+k]] = uint16(hi - step*(k+1))
		}
		i = j
	}
	if !ok {
		out = make(map[string]uint16, n)
		step := (span + 1) / (n + 1)
		if step < 1 {
			step = 1
		}
		for i, k := range keys {
			out[k] = uint16(int(a.max) - step*(i+1) + 1)
		}
	}
	a.prev = out
	return out, nil
}
