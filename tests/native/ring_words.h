/* The words the native test programs print for hm_ring statuses (pytest reads them). */
#ifndef RING_WORDS_H
#define RING_WORDS_H

#include "hm_ring.h"

static inline const char *ring_status_word(hm_ring_status st) {
    switch (st) {
    case HM_RING_OK: return "ok";
    case HM_RING_REFUSED_FULL: return "refused_full";
    case HM_RING_REFUSED_INVALID: return "refused_invalid";
    case HM_RING_NO_RECORD: return "no_record";
    case HM_RING_BAD_STATE: return "bad_state";
    case HM_RING_BAD_ARG: return "bad_arg";
    }
    return "unknown";
}

#endif
