package redisconn

import "strings"

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// Slot returns the cluster hash slot of key: CRC16 (XMODEM) of the key, or
// of its hash tag, modulo SlotCount. The hash tag is what lies between the
// first '{' and the first '}' after it, when that is not empty; keys that
// share a tag share a slot, which is what lets one script touch several
// keys in a cluster.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key) % SlotCount)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0, no
// reflection), the checksum Redis Cluster hashes keys with. Keys are short:
// the bitwise form costs no table.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
