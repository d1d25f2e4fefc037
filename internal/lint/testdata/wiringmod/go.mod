module example.com/wiringmod

go 1.26
