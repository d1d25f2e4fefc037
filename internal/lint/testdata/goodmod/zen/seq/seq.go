package seq
