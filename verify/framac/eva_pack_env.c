/* The frame of hm_cbor_skip for WP in the pack-path entry (tools/verify_c.py eva_pack):
 * what it may write. hm_knowledge_accept and check_protected call it, and hm_cbor_check
 * does; without an assigns clause WP takes such a call to write all of memory. The
 * clause is merged into hm_cbor.c's declaration and checked by From over EVA's results
 * (-from-verify-assigns: the locations the analysed calls write), not by WP, which
 * does not run on hm_cbor_skip's body here (tools/verify_c.py WP_GIVEN). Not part of
 * any build. */
#include "hm_cbor.h"

/*@ assigns r->pos, r->err; */
hm_cbor_err hm_cbor_skip(hm_cbor_r *r);

/*@ assigns \nothing; */
hm_cbor_err hm_cbor_check(const uint8_t *p, size_t len);
