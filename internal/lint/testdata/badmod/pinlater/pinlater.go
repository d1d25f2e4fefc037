package pinlater
