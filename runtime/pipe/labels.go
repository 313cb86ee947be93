package pipe

// Labels along the pipe (Spec.ShipLabels): the first stage's DATA_LOAD
// loads a micro-batch's labels with its input, and every rank passes them
// on ahead of the chunk's activation,
//
//	x.DataRecv(At(s, m, peer, slot)) // DATA_RECV: before RECV_F(s, m), into the chunk's slot
//	x.DataSend(At(s, m, peer, slot)) // DATA_SEND: before SEND_F(s, m), from the chunk's slot
//
// on the data channel (transfer.go). The last stage's F waits for them (the
// loss). A DataRecv completes before the RECV_F posted after it (the comm
// stream runs in order), so a DataSend after the chunk's F never waits.

// takeLabels waits for the pending receive of the labels of the chunk in s
// and keeps them; false when the rank has failed meanwhile.
func (x *Exec) takeLabels(s *slotState) bool {
	ok := x.await(s, dataPending)
	s.target, s.rdata = s.rdata, nil
	return ok
}
